"""Validation streams: peak memory does not grow with the file size (measured as VmHWM in a fresh
interpreter per file). Structure-only validation (what the API does at upload) of a generated 200 MB
file, and tokenizing validation (what the trainer does) of 2 MB vs 12 MB."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

PROBE = Path(__file__).resolve().parent / "memprobe.py"
REPO_ROOT = Path(__file__).resolve().parents[2]
FILLER = ("Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May. "
          "How many clips did Natalia sell altogether in April and May? ") * 3


def _generate(path: Path, target_bytes: int) -> int:
    """A chat JSONL file of about `target_bytes`, every line distinct (~700 bytes a line)."""
    n = size = 0
    with path.open("w", encoding="utf-8") as f:
        while size < target_bytes:
            chunk = []
            for _ in range(2000):
                row = {"messages": [{"role": "user", "content": f"Question {n}: {FILLER}"},
                                    {"role": "assistant", "content": f"Answer {n}: 48 + 24 = 72.\n#### 72"}]}
                chunk.append(json.dumps(row) + "\n")
                n += 1
            text = "".join(chunk)
            f.write(text)
            size += len(text)
    return n


def _probe(path: Path, *extra: str) -> dict:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    out = subprocess.run([sys.executable, str(PROBE), str(path), *extra], capture_output=True, text=True,
                         env=env, cwd=REPO_ROOT, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_structure_validation_of_200mb_in_flat_memory(tmp_path):
    small, big = tmp_path / "small.jsonl", tmp_path / "big.jsonl"
    n_small = _generate(small, 2 << 20)
    n_big = _generate(big, 200 << 20)
    assert big.stat().st_size >= 200 << 20
    a, b = _probe(small), _probe(big)
    assert a["ok"] and b["ok"] and (a["valid"], b["valid"]) == (n_small, n_big)
    growth_mb = b["peak_mib"] - b["baseline_mib"]
    print(f"\n200 MB ({n_big} examples): peak RSS {b['peak_mib']:.1f} MiB, +{growth_mb:.1f} MiB over "
          f"baseline, {b['seconds']} s; 2 MB: +{a['peak_mib'] - a['baseline_mib']:.1f} MiB")
    # bounded by 12 bytes per example for duplicate detection (+ sorting scratch), not by the file size
    assert growth_mb < 32, f"validating 200 MB raised peak RSS by {growth_mb:.1f} MiB"


def test_tokenizing_validation_in_flat_memory(tmp_path):
    small, big = tmp_path / "small.jsonl", tmp_path / "big.jsonl"
    _generate(small, 1 << 20)
    _generate(big, 8 << 20)
    a, b = _probe(small, "--tokenizer"), _probe(big, "--tokenizer")
    assert a["ok"] and b["ok"]
    growth = [r["peak_mib"] - r["baseline_mib"] for r in (a, b)]
    print(f"\ntokenizing validation: 1 MB +{growth[0]:.1f} MiB, 8 MB +{growth[1]:.1f} MiB ({b['seconds']} s)")
    assert growth[1] < growth[0] + 16
