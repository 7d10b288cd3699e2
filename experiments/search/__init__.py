"""The search benchmark: ground truth, harness, scoring and the runner (see README.md)."""
