"""Benchmarks that print figures (docs/design.md#layout); run them with
`python bench/run_all.py`."""
