"""`DataSettings`: a job's training and validation data settings (torch-free)."""

from __future__ import annotations

from dataclasses import dataclass

from lcsb_core.errors import require

ON_TRUNCATION = ("report", "fail")

GROUP_BY_LENGTH_DPO = True
"""A DPO job's `group_by_length` when it names none. Measured (BENCHMARKS.md, "DPO"; bench/grids/dpo_hh.yaml's
`grouped` and `ungrouped`, rule stated before they ran): hh-rlhf-harmless, SmolLM2-135M-Instruct, seed 0, Xeon,
2 threads: batches of 4 pairs pad to 1,845 tokens a step instead of 2,771; 360 grouped steps (1,492 s) ended at
validation DPO loss 0.6672 and accuracy 65.1 %, 270 random ones (1,702 s) at 0.7235 and 65.1 %."""


@dataclass
class DataSettings:
    """Training data: a JSONL (chat, prompt-completion or text) or .txt file; `validation_file` for
    periodic eval; `max_seq_len` in tokens; `train_on_inputs` puts the loss on prompt tokens too;
    `pad_to_multiple_of` rounds each batch's padded length up (tokens), so the number of distinct
    batch shapes stays small (CPU kernel caches grow by one entry per new shape); `pack` places each
    batch's examples into rows of up to `max_seq_len` tokens with a block-diagonal attention mask
    (no attention across examples) instead of padding them. `on_truncation`: `report` (examples longer
    than `max_seq_len` are cut keeping the start; those left with no target token are left out; both
    are counted and named by line in the dataset report) or `fail` (any such example fails the run with
    a DataError naming the lines, before the model loads). `group_by_length` (transformers'
    `TrainingArguments.group_by_length`): each epoch's shuffled order puts examples (DPO: pairs, by their
    longer side) of similar length in the same batch, so a batch pads less and a step computes fewer
    padding tokens; every example still comes once per epoch (`lcsb_core.data.epoch_order`). Not with
    `pack`. None (the default): `TrainConfig` sets it, on for DPO (`GROUP_BY_LENGTH_DPO`), off for
    supervised data (not measured there; packing is that data's way to pad less)."""

    train_file: str = ""
    validation_file: str | None = None
    max_seq_len: int = 512
    train_on_inputs: bool = False
    skip_invalid: bool = False
    min_examples: int = 10
    max_eval_examples: int | None = None
    pad_to_multiple_of: int = 64
    pack: bool = False
    on_truncation: str = "report"
    group_by_length: bool | None = None

    def __post_init__(self) -> None:
        require(bool(self.train_file), "data.train_file", "is required")
        require(self.on_truncation in ON_TRUNCATION, "data.on_truncation",
               f"must be one of {', '.join(ON_TRUNCATION)}, got {self.on_truncation!r}")
        require(16 <= self.max_seq_len <= 131072, "data.max_seq_len",
               f"must be in [16, 131072] tokens, got {self.max_seq_len!r}")
        require(self.min_examples >= 1, "data.min_examples", "must be >= 1")
        require(self.pad_to_multiple_of >= 1, "data.pad_to_multiple_of", "must be >= 1")
        require(not (self.group_by_length and self.pack), "data.group_by_length",
                "does not apply with {data.pack} (a packed row holds several examples); set one of them",
                mentions=("data.pack",))
