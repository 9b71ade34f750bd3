"""Benchmarks: runnable modules (`python -m benchmarks.NAME`) writing to `results/`."""
