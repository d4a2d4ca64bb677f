"""Run by test_data_memory in a fresh interpreter: validate one file and print peak memory as JSON.

    python memprobe.py FILE [--tokenizer]
prints {"baseline_mib": VmHWM after imports and a warm-up validation (peak reset to the current RSS),
"peak_mib": VmHWM after validating FILE, "seconds": ..., "valid": ...}. VmHWM is the process's peak
resident set size (`lcsb_core.training.memory_probe`).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path


def main() -> None:
    import torch

    from lcsb_core.data import ValidationLimits, validate_file
    from lcsb_core.training.memory_probe import peak_mib, reset_peak

    path = sys.argv[1]
    tokenizer = None
    if "--tokenizer" in sys.argv:
        from transformers import AutoTokenizer

        from lcsb_core.models.gguf_import import ensure_default_model

        tokenizer = AutoTokenizer.from_pretrained(ensure_default_model())
    warmup = Path(__file__).resolve().parent / "cases" / "clean_reference.jsonl"
    validate_file(warmup, tokenizer=tokenizer, limits=ValidationLimits(min_examples=1))
    cpu = torch.device("cpu")
    reset_peak(cpu)  # the peak starts again at the current RSS, so load-time peaks do not hide growth
    baseline = peak_mib(cpu)
    start = time.perf_counter()
    report = validate_file(path, tokenizer=tokenizer, max_seq_len=512)
    seconds = time.perf_counter() - start
    print(json.dumps({"baseline_mib": baseline, "peak_mib": peak_mib(cpu), "seconds": round(seconds, 2),
                      "valid": report.valid_examples, "invalid": report.invalid_examples, "ok": report.ok}))


if __name__ == "__main__":
    main()
