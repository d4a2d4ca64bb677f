"""Graded evaluation's cost against the README main job's training time (issue 34's target: 64 samples x
128 new tokens, at two evaluations, <= 25 % of the training time on 2 CPU cores with SmolLM2;
BENCHMARKS.md "Graded evaluation cost").

One process, one model, side by side: SmolLM2-135M-Instruct NF4 with the README main job's settings
(examples/gsm8k_job.yaml: `topfull` at its rule's learning rate, LoRA r16/alpha 32 on the seven
projections, batch 4, max_seq_len 384, GSM8K train rows 0-399 -> 100 optimizer steps), then

1. `--train-steps` real optimizer steps of that job through the trainer, timed (the first
   `--skip-steps` left out of the median as warm-up);
2. graded evaluation's generation (`lcsb_core.eval.generate.generate_answers`, what the trainer runs) on
   the first `--samples` GSM8K test prompts, `--new-tokens` each, with the adapter those steps trained:
   `after` = the product (each NF4 weight dequantized once per `generate` call), `before` = bitsandbytes'
   per-forward dequantization (the module's `dequantized_weights` replaced by a no-op), alternating for
   `--rounds` rounds; the number of identical answers is printed.

Printed: seconds per evaluation, and the share `2 x evaluation / (median step x 100)` of the job's
training time.

    .venv/bin/python bench/graded_eval_cost.py --out bench/results/graded_eval_cost.json
    .venv/bin/python bench/graded_eval_cost.py --train-steps 2 --skip-steps 1 --samples 4 --new-tokens 8 \\
        --out /tmp/smoke.json   # smoke
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.common.paths import DATA as SHARED_DATA
from bench.common.results import write_result

GSM8K = SHARED_DATA / "gsm8k"
JOB_STEPS = 100  # 400 training examples in batches of 4, one epoch: the README main job


@contextlib.contextmanager
def per_forward_dequantization() -> Iterator[None]:
    """`before`: generation as it was, bitsandbytes' own forward (a dequantization per call) under the
    model's bf16/fp32 autocast: `dequantized_weights` patches no layer, so `generate_answers` keeps autocast."""
    from lcsb_core.eval import generate

    kept = generate.dequantized_weights
    generate.dequantized_weights = lambda model: contextlib.nullcontext(  # type: ignore[assignment,return-value]
        {"layers": 0, "cached": 0})
    try:
        yield
    finally:
        generate.dequantized_weights = kept


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--train-steps", type=int, default=10)
    parser.add_argument("--skip-steps", type=int, default=2)
    parser.add_argument("--samples", type=int, default=64)
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    started, load_before = datetime.now(UTC), list(os.getloadavg())
    import torch

    from lcsb_core.data import gsm8k_to_chat
    from lcsb_core.eval.generate import generate_answers
    from lcsb_core.eval.samples import read_samples
    from lcsb_core.training.callbacks import StepReport, TrainerCallback
    from lcsb_core.training.config import TrainConfig
    from lcsb_core.training.trainer import Trainer

    if args.threads:
        torch.set_num_threads(args.threads)
    tmp = Path(tempfile.mkdtemp(prefix="graded-cost-"))
    lines = (GSM8K / "train.jsonl").read_text().splitlines()[:400]
    (tmp / "train.jsonl").write_text("".join(json.dumps(gsm8k_to_chat(json.loads(r))) + "\n" for r in lines))
    test = (GSM8K / "test.jsonl").read_text().splitlines()[:args.samples]
    (tmp / "test.jsonl").write_text("".join(json.dumps(gsm8k_to_chat(json.loads(r))) + "\n" for r in test))
    config = {"data": {"train_file": str(tmp / "train.jsonl"), "max_seq_len": 384},
              "model": {"name_or_path": "SmolLM2-135M-Instruct", "quantization": "nf4", "device": "cpu"},
              "lora": {"rank": 16, "alpha": 32, "dropout": 0.0},
              "lcsb": {"schedule": "topfull", "fraction": 0.25, "momentum_for_skipped": True},
              "batch_size": 4, "max_steps": args.train_steps, "eval_every": 0, "save_every": 0, "seed": 42,
              "output_dir": str(tmp / "run")}

    class Steps(TrainerCallback):
        def __init__(self) -> None:
            self.seconds: list[float] = []

        def on_step(self, report: StepReport) -> None:
            self.seconds.append(report.step_time_s)

    steps = Steps()
    trainer = Trainer(TrainConfig.from_dict(config), callbacks=[steps])
    trainer.train()
    step_s = statistics.median(steps.seconds[args.skip_steps:])
    samples = read_samples(tmp / "test.jsonl", args.samples)
    prompts = [s.prompt_ids(trainer.tokenizer) for s in samples]
    timings: dict[str, list[float]] = {"after": [], "before": []}
    answers: dict[str, list[str]] = {}
    for _ in range(args.rounds):
        for mode in ("after", "before"):
            with per_forward_dequantization() if mode == "before" else contextlib.nullcontext():
                t0 = time.perf_counter()
                answers[mode] = generate_answers(trainer.model, trainer.tokenizer, prompts,
                                                 max_new_tokens=args.new_tokens, max_prompt_tokens=384)[0]
                timings[mode].append(time.perf_counter() - t0)
            print(f"{mode}: {timings[mode][-1]:.1f} s", flush=True)
    training_s = step_s * JOB_STEPS
    result: dict[str, Any] = {
        "median_step_s": round(step_s, 3), "step_s": [round(x, 3) for x in steps.seconds],
        "job_training_s": round(training_s, 1),
        "eval_s": {m: [round(x, 2) for x in v] for m, v in timings.items()},
        "share_of_training_at_two_evals": {m: round(2 * statistics.median(v) / training_s, 4)
                                           for m, v in timings.items()},
        "speedup": round(statistics.median(timings["before"]) / statistics.median(timings["after"]), 2),
        "answers_identical": sum(a == b for a, b in zip(answers["after"], answers["before"], strict=True)),
        "answer_tokens": sum(len(trainer.tokenizer(a)["input_ids"]) for a in answers["after"]),
        "torch_threads": torch.get_num_threads(), "load_average_after": list(os.getloadavg())}
    print(json.dumps(result, indent=1))
    write_result(args.out, result, {**config, "samples": args.samples, "new_tokens": args.new_tokens,
                                    "rounds": args.rounds}, started=started, load_before=load_before)


if __name__ == "__main__":
    main()
