"""Kubernetes backends: the scheduler extender and the custom scheduler (docs/live-kubernetes.md)."""
