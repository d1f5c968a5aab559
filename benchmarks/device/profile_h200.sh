#!/usr/bin/env bash
# Profile four torchvision training jobs on this machine's GPU 0 with `wattsched profile`, gpu-bound regime:
# each alone, the four pairs of the h200-colocation-probe dataset (alexnet+resnet50, resnet18+resnet50,
# alexnet+resnet18, resnet50+vgg16), the triple alexnet+resnet18+resnet50 and all four together.
#
# Read-only: no --power-limits, so no GPU setting is changed (the power limit is printed before and after).
# Needs python3 with torch, torchvision, pynvml (nvidia-ml-py), numpy, typer and rich; not pydantic: it runs
# `python -m wattsched.profiling` from this checkout's src/ without installing wattsched.
#
# Runtime estimate: starting the four job processes (torch import, model build) ~15-30 s, their warm-up one after
# another ~10-20 s, two idle readings 2 x 4 s, ten 6-s windows 60 s: about 1.5-2 minutes, well under 4. Measured
# on one H200 on 2026-11-26: 102 s (output in docs/measurements/profile_h200_gpu_bound.csv, docs/profile.md §5).
#
# Output: $OUT/profile-gpu-bound.csv (OUT defaults to runs/profile-device) and $OUT/profile-gpu-bound.log.
# Usage: OUT=/some/dir bash benchmarks/device/profile_h200.sh   (PYTHON=... to pick the interpreter)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
out_dir=${OUT:-$root/runs/profile-device}
python=${PYTHON:-python3}
mkdir -p "$out_dir"
log="$out_dir/profile-gpu-bound.log"

limit() { "$python" -c 'import pynvml as n; n.nvmlInit(); h = n.nvmlDeviceGetHandleByIndex(0); print(n.nvmlDeviceGetPowerManagementLimit(h) / 1000)'; }
echo "power limit before: $(limit) W" | tee "$log"
start=$(date +%s)
PYTHONPATH="$root/src${PYTHONPATH:+:$PYTHONPATH}" "$python" -m wattsched.profiling \
    --models alexnet:256,resnet18:128,resnet50:128,vgg16:64 --regime gpu-bound \
    --sets 1 \
    --set alexnet+resnet50 --set resnet18+resnet50 --set alexnet+resnet18 --set resnet50+vgg16 \
    --set alexnet+resnet18+resnet50 --set alexnet+resnet18+resnet50+vgg16 \
    --window-s 6 --warmup-steps 15 --idle-s 4 --device-index 0 \
    --out "$out_dir/profile-gpu-bound.csv" 2>&1 | tee -a "$log"
echo "elapsed: $(( $(date +%s) - start )) s" | tee -a "$log"
echo "power limit after: $(limit) W" | tee -a "$log"
