"""Benchmarks of the recovery console: `make bench` (or `python -m bench [classify] [board]`).

They report; they never fail on speed. See bench/__main__.py.
"""
