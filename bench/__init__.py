"""Benchmarks (``make bench`` → ``python -m bench``): each ``bench/bench_*.py`` exposes ``main() -> dict``.

Results are ratios against a baseline measured in the same run, never absolute pass/fail timings.
"""
