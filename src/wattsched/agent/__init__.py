"""Per-node GPU agent: DCGM-named Prometheus metrics and a localhost API for power limits and locked clocks.

``nvml`` wraps the pynvml calls, ``fake_nvml`` stands in for pynvml without a GPU, ``server`` is the agent
and ``client`` is what the scheduler uses to talk to it (docs/agent.md).
"""
