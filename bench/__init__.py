"""Benchmarks: each prints proxy/direct ratios measured in the same run."""
