"""Benchmarks of LCSB fine-tuning: thin drivers over `lcsb_core` and the service (see bench/README.md).

A package so that its scripts share `bench.common` and are type-checked; run a script as
`python bench/<name>.py` or `python -m bench.<name>` from the repository root.
"""
