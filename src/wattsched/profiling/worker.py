"""One training job of ``wattsched profile``, as its own process: ``python -m wattsched.profiling.worker``.

Each job runs in its own process so that several jobs on one GPU are time-sliced by the driver, as in the
h200-colocation-probe dataset. The process keeps its CUDA context, weights and optimizer state for the whole
profile, also while it waits between windows. It imports only torch and torchvision (not wattsched).

Protocol, one line each way (stdin -> stdout):

* after start-up (model built on the GPU): ``loaded``
* ``warmup`` -> the warm-up steps, then ``ready <peak_mem_gib>``
* ``run <seconds>`` -> training steps until ``seconds`` have passed -> ``done <steps> <seconds> <peak_mem_gib>``
* ``quit`` (or end of input) -> exit 0
* any failure -> ``error <one line>`` and exit 1

The job: a torchvision classification model with random weights at ImageNet shapes (224 x 224, 1000 classes),
SGD with momentum, bf16 autocast, channels-last, cuDNN benchmark on. ``gpu-bound``: the batch lives on the GPU.
``input-bound``: every step fills a pinned host uint8 batch with random values on the CPU, copies it to the GPU
and normalises it there, like a data loader that the GPU waits for.
"""

from __future__ import annotations

import argparse
import sys
import time

IMAGE_SIZE = 224
CLASSES = 1000
SYNC_EVERY_STEPS = 8  # bounds how far the CPU runs ahead of the GPU, so the window ends near its deadline
GIB = 1024**3


def _say(line: str) -> None:
    print(line, flush=True)


class TrainingJob:
    def __init__(self, model_name: str, batch: int, regime: str, seed: int = 0):
        import torch
        import torchvision

        if not torch.cuda.is_available():
            raise RuntimeError(
                "PyTorch sees no CUDA GPU (CUDA_VISIBLE_DEVICES, driver, or a CPU-only torch build)"
            )
        names = torchvision.models.list_models(module=torchvision.models)
        if model_name not in names:
            raise RuntimeError(
                f"unknown torchvision classification model {model_name!r}; e.g. {', '.join(names[:8])}"
            )
        torch.manual_seed(seed)
        torch.backends.cudnn.benchmark = True
        self.torch = torch
        self.device = torch.device("cuda", 0)
        self.batch = batch
        self.regime = regime
        model = torchvision.models.get_model(model_name, weights=None, num_classes=CLASSES)
        self.model = model.to(self.device, memory_format=torch.channels_last).train()
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=1e-3, momentum=0.9)
        self.loss = torch.nn.CrossEntropyLoss()
        self.labels = torch.randint(0, CLASSES, (batch,), device=self.device)
        shape = (batch, 3, IMAGE_SIZE, IMAGE_SIZE)
        if regime == "gpu-bound":
            self.images = torch.randn(shape, device=self.device).contiguous(memory_format=torch.channels_last)
        else:
            self.host_batch = torch.empty(shape, dtype=torch.uint8).pin_memory()
            self.mean = torch.tensor([0.485, 0.456, 0.406], device=self.device).view(1, 3, 1, 1) * 255
            self.std = torch.tensor([0.229, 0.224, 0.225], device=self.device).view(1, 3, 1, 1) * 255

    def _inputs(self):
        if self.regime == "gpu-bound":
            return self.images
        self.host_batch.random_(0, 256)  # the CPU work of a loader, on the critical path like a slow one
        on_gpu = self.host_batch.to(self.device, non_blocking=True).float()
        return ((on_gpu - self.mean) / self.std).contiguous(memory_format=self.torch.channels_last)

    def step(self) -> None:
        torch = self.torch
        self.optimizer.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            out = self.model(self._inputs())
            logits = out.logits if hasattr(out, "logits") else out  # inception/googlenet give aux outputs
            loss = self.loss(logits, self.labels)
        loss.backward()
        self.optimizer.step()

    def warm_up(self, steps: int) -> None:
        for _ in range(steps):
            self.step()
        self.torch.cuda.synchronize()

    def run(self, seconds: float) -> tuple[int, float]:
        torch = self.torch
        torch.cuda.synchronize()
        start = time.perf_counter()
        steps = 0
        while True:
            self.step()
            steps += 1
            if steps % SYNC_EVERY_STEPS == 0:
                torch.cuda.synchronize()
            if time.perf_counter() - start >= seconds:
                break
        torch.cuda.synchronize()
        return steps, time.perf_counter() - start

    def peak_mem_gib(self) -> float:
        return self.torch.cuda.max_memory_allocated(self.device) / GIB


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m wattsched.profiling.worker")
    parser.add_argument("--model", required=True)
    parser.add_argument("--batch", type=int, required=True)
    parser.add_argument("--regime", choices=("gpu-bound", "input-bound"), default="gpu-bound")
    parser.add_argument("--warmup-steps", type=int, default=15)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    try:
        job = TrainingJob(args.model, args.batch, args.regime, args.seed)
        _say("loaded")
        for line in sys.stdin:
            command, _, value = line.strip().partition(" ")
            if command == "warmup":
                job.warm_up(args.warmup_steps)
                _say(f"ready {job.peak_mem_gib():.4f}")
            elif command == "run":
                steps, seconds = job.run(float(value))
                _say(f"done {steps} {seconds:.4f} {job.peak_mem_gib():.4f}")
            elif command == "quit":
                break
            else:
                raise RuntimeError(f"unknown command {line.strip()!r}")
    except Exception as exc:  # one line for the parent; it names the job
        _say("error " + " ".join(f"{type(exc).__name__}: {exc}".split()))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
