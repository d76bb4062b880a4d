"""Benchmarks: plain scripts (`python benchmarks/cache.py`, ...) and the replay package
(`python -m benchmarks.replay`). This file only makes `benchmarks.replay` importable."""
