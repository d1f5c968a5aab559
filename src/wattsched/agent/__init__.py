"""Per-node GPU agent: DCGM-named Prometheus metrics and an API for power limits and locked clocks.

``nvml`` wraps the pynvml calls, ``fake_nvml`` stands in for pynvml without a GPU, ``server`` is the agent
(reads over TCP, changes over a Unix socket), ``auth`` decides who may change, and ``client`` is what the scheduler
and the Slurm prolog use to talk to it (docs/agent.md).
"""
