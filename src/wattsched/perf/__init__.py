"""Job performance models: how fast a job runs, and how much power its GPUs draw, in a configuration.

Pure models: no engine, no policies. ``model.PerformanceModel`` is the one object the engine and the policies
query (docs/perf.md).
"""
