"""Reproducible experiments; importable as a package (``from experiments.search import harness``)."""
