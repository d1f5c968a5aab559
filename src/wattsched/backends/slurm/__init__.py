"""Live Slurm backend: the adapter (backend.py) and an in-memory front end (fake.py). The local test Slurm is test
infrastructure, outside the package: tests/slurm_testbed.py."""
