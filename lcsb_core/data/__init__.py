"""Datasets: three JSONL formats and .txt corpora, one streaming validator shared by the API (at upload)
and the trainer (before training), chat-template tokenization with assistant-only labels, batching.

    from lcsb_core.data import validate_file, build_dataset, iter_batches
    report = validate_file("train.jsonl")                         # structure only: at upload
    report = validate_file("train.jsonl", tokenizer=tok, max_seq_len=2048)   # + token statistics
    ds = build_dataset("train.jsonl", tok, max_seq_len=2048)      # raises DataError if unusable
    for batch in iter_batches(ds, 8, seed=0, epoch=0, pad_token_id=tok.pad_token_id): ...

Names are imported lazily: validating a file (what the API does) loads neither torch nor transformers;
`collate`, `build_dataset`, `iter_batches` and `TokenizedDataset` import torch on first use.

Modules: settings (`DataSettings`), limits (caps), reader (streaming lines), json_lines (strict JSON per
line, `RecordError`), formats (per-line checks), convert (GSM8K), tokenization (labels), stats, report,
validator, text_corpus (.txt packing), batching (collate), pairs (DPO pair batches), dataset
(build_dataset, iter_batches), run_length (`planned_steps`: a run's optimizer steps, torch-free).
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "collate": "batching", "count_target_tokens": "batching", "pack_rows": "batching",
    "convert_jsonl": "convert", "gsm8k_to_chat": "convert", "gsm8k_final_answer": "convert",
    "TokenizedDataset": "dataset", "build_dataset": "dataset", "check_tokenizer": "dataset",
    "iter_batches": "dataset", "num_batches": "dataset", "sniff_format": "dataset",
    "CHAT": "formats", "FORMATS": "formats", "PROMPT_COMPLETION": "formats", "TEXT": "formats",
    "Example": "formats", "Issue": "formats", "Message": "formats", "parse_record": "formats",
    "ValidationLimits": "limits",
    "TXT_MODE": "report", "ValidationReport": "report",
    "TokenStats": "stats",
    "IGNORE_INDEX": "tokenization", "EncodedExample": "tokenization", "ExampleEncoder": "tokenization",
    "chat_template_error": "tokenization",
    "scan_file": "validator", "validate_file": "validator",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'lcsb_core.data' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"lcsb_core.data.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
