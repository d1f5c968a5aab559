"""wattsched: energy-aware scheduling of deep-learning jobs on GPU clusters."""

__version__ = "0.1.0"
