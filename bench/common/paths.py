"""Where the benchmarks find the repository and the shared data sets (`../shared/data` beside the checkout:
GSM8K under `gsm8k/`, WikiText-2 under `wikitext-2/`)."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT.parent / "shared" / "data"
