"""Helpers the benchmarks share: timing (`timing`), the bare optimizer step (`bare_step`), quality curves
(`curves`), the C allocator's retain mode (`allocator`), result files that describe themselves (`results`)."""
