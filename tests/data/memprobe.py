"""Run by test_data_memory in a fresh interpreter: validate one file and print peak memory as JSON.

    python memprobe.py FILE [--tokenizer]
prints {"baseline_kb": VmHWM after imports and a warm-up validation (peak reset to the current RSS),
"peak_kb": VmHWM after validating FILE, "seconds": ..., "valid": ...}. VmHWM is the process's peak
resident set size (/proc/self/status).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path


def vm_hwm_kb() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise RuntimeError("no VmHWM in /proc/self/status")


def main() -> None:
    from lcsb_core.data import ValidationLimits, validate_file

    path = sys.argv[1]
    tokenizer = None
    if "--tokenizer" in sys.argv:
        from transformers import AutoTokenizer

        from lcsb_core.models.gguf_import import ensure_default_model

        tokenizer = AutoTokenizer.from_pretrained(ensure_default_model())
    warmup = Path(__file__).resolve().parent / "cases" / "clean_reference.jsonl"
    validate_file(warmup, tokenizer=tokenizer, limits=ValidationLimits(min_examples=1))
    try:  # reset the peak to the current RSS (Linux >= 4.0), so load-time peaks do not hide growth
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        pass
    baseline = vm_hwm_kb()
    start = time.perf_counter()
    report = validate_file(path, tokenizer=tokenizer, max_seq_len=512)
    seconds = time.perf_counter() - start
    print(json.dumps({"baseline_kb": baseline, "peak_kb": vm_hwm_kb(), "seconds": round(seconds, 2),
                      "valid": report.valid_examples, "invalid": report.invalid_examples, "ok": report.ok}))


if __name__ == "__main__":
    main()
