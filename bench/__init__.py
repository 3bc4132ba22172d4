"""Benchmarks that print figures (DESIGN §3); run them with `python bench/run_all.py`."""
