"""``wattsched profile``: measure training jobs on a GPU, alone and time-sliced in sets, into a profile CSV.

``runner`` (the measurement plan and its rows), ``sampler`` (NVML over a window), ``workers`` (one process per
job; ``worker`` is the built-in PyTorch job), ``fake`` (simulated jobs on the fake NVML), ``jobs`` (what to
measure). ``python -m wattsched.profiling`` is the same command without the rest of the CLI (docs/profile.md).
"""
