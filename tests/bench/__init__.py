"""Tests of the benchmarks' own machinery (the `bench` package: its shared helpers and scripts)."""
