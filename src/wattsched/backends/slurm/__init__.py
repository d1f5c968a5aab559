"""Live Slurm backend: the adapter and a local test Slurm (testbed.py)."""
