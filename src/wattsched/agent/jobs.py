"""A job's GPU setting, from the scheduler to the node agent (docs/agent.md §7, docs/live-slurm.md §1).

Slurm stores ``--gpu-freq`` but does not apply it without its NVML plugin, and the agent takes changes only on its
node's Unix socket from root and the users it allows (auth.py). So the scheduler writes the setting a policy chose
into the job's comment before it lets the job go
(``scontrol update jobid=N comment=wattsched-gpu:power_limit_fraction=0.6``), and on each node the job's prolog
(``wattsched agent-job start``, run as root by slurmd) reads it and asks the local agent to apply it to the job's
GPUs; the epilog (``wattsched agent-job end``) resets them. Fractions are of the GPU's own range as the agent
reports it: a power limit of f x the maximum limit, or the SM clock locked at most at f x the highest supported
clock.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

from ..core.errors import WattschedError
from ..core.settings import DEFAULT_SETTING, GpuSetting
from .client import AgentClient

PREFIX = "wattsched-gpu:"
_FIELDS = ("power_limit_fraction", "sm_clock_fraction")


def encode_setting(setting: GpuSetting) -> str:
    """The job comment that carries a setting ("" for the default)."""
    for name in _FIELDS:
        value = getattr(setting, name)
        if value is not None:
            return f"{PREFIX}{name}={value:.6g}"
    return ""


def decode_setting(comment: str | None) -> GpuSetting:
    """The setting in a job comment; the default when the comment carries none."""
    text = (comment or "").strip()
    if not text.startswith(PREFIX):
        return DEFAULT_SETTING
    name, _, value = text[len(PREFIX) :].partition("=")
    if name not in _FIELDS:
        raise WattschedError(f"job comment {comment!r}: unknown GPU setting {name!r} ({', '.join(_FIELDS)})")
    try:
        fraction = float(value)
    except ValueError:
        raise WattschedError(f"job comment {comment!r}: {name} must be a number") from None
    if not 0 < fraction <= 1:
        raise WattschedError(f"job comment {comment!r}: {name} must lie in (0, 1]")
    return GpuSetting(**{name: fraction})


def job_gpus(env: Mapping[str, str] | None = None) -> list[int]:
    """The job's GPU indices on this node: SLURM_JOB_GPUS in a prolog, CUDA_VISIBLE_DEVICES in a task prolog."""
    env = os.environ if env is None else env
    text = env.get("SLURM_JOB_GPUS") or env.get("CUDA_VISIBLE_DEVICES") or ""
    try:
        return [int(g) for g in text.split(",") if g.strip()]
    except ValueError:
        raise WattschedError(f"GPU list {text!r} is not a list of indices") from None


def apply_setting(client: AgentClient, gpus: Sequence[int], setting: GpuSetting) -> list[str]:
    """Ask the local agent to apply `setting` to `gpus`; what was done, one line per GPU."""
    done = []
    for gpu in gpus:
        state = client.gpu_state(gpu)
        if setting.power_limit_fraction is not None:
            low, high = state["power_limit_range_w"]
            watts = min(max(setting.power_limit_fraction * high, low), high)
            client.set_power_limit(gpu, watts)
            done.append(f"GPU {gpu}: power limit {watts:.0f} W")
        elif setting.sm_clock_fraction is not None:
            clock_range = state.get("sm_clock_range_mhz")
            if not clock_range:
                raise WattschedError(f"GPU {gpu}: the agent reports no supported SM clocks to lock")
            low, high = clock_range
            mhz = int(min(max(round(setting.sm_clock_fraction * high), low), high))
            client.lock_clocks(gpu, int(low), mhz)
            done.append(f"GPU {gpu}: SM clock locked to {int(low)}-{mhz} MHz")
    return done


def measure_job(client: AgentClient, phase: str, job: str, gpus: Sequence[int], name: str = "") -> str:
    """Tell the agent that `job` starts or ends on `gpus`, so it measures the job's GPU windows (jobmeter.py);
    what was done, or "" when there is nothing to measure (no job id, no GPUs)."""
    if job in ("", "?") or not gpus:
        return ""
    if phase == "start":
        client.job_started(job, list(gpus), name)
        return f"measuring GPUs {','.join(map(str, gpus))}"
    client.job_ended(job)
    return "measurement closed"


def reset_gpus(client: AgentClient, gpus: Sequence[int]) -> list[str]:
    for gpu in gpus:
        client.reset(gpu)
    return [f"GPU {gpu}: reset" for gpu in gpus]
