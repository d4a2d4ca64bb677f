"""Quality at equal steps and at equal wall-clock time: full backprop vs freeze vs LCSB (cyclic, random).

    python bench/quality.py --task gsm8k --schedules full,freeze,cyclic,random --seeds 0,1,2 \
        --steps 60 --extend cyclic=100 --eval-every 20 --exact-match --out bench/results/gsm8k
    python bench/quality.py --task wikitext --schedules full,freeze,cyclic,random --seeds 0 --out bench/results/wikitext
    python bench/quality.py --task gsm8k --schedules full,cyclic,freeze --lrs 2e-4,1e-3 \
        --bnb-cpu-repacking off,on --out bench/results/stability            # table 3
    python bench/quality.py --task gsm8k --schedules cyclic --momentum on,off --out bench/results/momentum
    python bench/quality_report.py bench/results/gsm8k                        # tables + plots

Every run: SmolLM2-135M-Instruct or `--model gemma-3-270m` (NF4 unless --quant), LoRA r16/alpha 32 on all
seven projections, AdamW, batch 4, `--warmup` steps of linear warmup then a constant learning rate (so a longer run's
first N steps are the N-step run: `--extend cyclic=100` gives both the equal-steps value at `--steps`
and the equal-time curve; `--lr-schedule linear`, a job's default, or `cosine` decays it to 0 at `--steps`
instead), clip 1.0. Data:
- gsm8k: the first `--train-examples` rows of `../shared/data/gsm8k/train.jsonl` as chat (question ->
  worked answer, loss on the answer), eval on the first `--eval-examples` (200) rows of `test.jsonl`:
  eval loss (nats per answer token), token accuracy, and with `--exact-match` greedy decoding of those
  questions scored on the `#### <number>` line. A model without a chat template (gemma-3-270m, a base
  model) gets the same rows as prompt/completion ("Question: ...\nAnswer:" -> " <answer>") instead.
- code-alpaca: the first `--train-examples` rows of `../shared/data/code-alpaca/train.jsonl` as chat (user:
  the instruction, plus a blank line and the input when there is one; assistant: the output; loss on the
  answer; `code_alpaca_to_chat`; the 2 rows with an empty output left out), eval on the first
  `--eval-examples` rows of its `validation.jsonl`
  (a model without a chat template gets "Instruction: ...\nResponse:" -> " <output>" instead).
- wikitext: `../shared/data/wikitext-2/valid.txt` split at a line boundary: the first 80 % of the lines
  train, the rest is held out; both packed into blocks of `--seq` tokens; held-out perplexity = exp(loss).
- hh-rlhf (DPO, issue 50): preference pairs of `../shared/data/hh-rlhf-harmless/`: the first
  `--train-examples` pairs of train.jsonl and `--eval-examples` of validation.jsonl whose two sides fit in
  `--seq` tokens (the others are left out and counted in the result's `data` entry: the product's
  `skip_invalid`), DPO with `--beta`; eval loss is the mean DPO loss per pair and every evaluation records
  the `eval_rewards/*` metrics (`rewards/accuracies`: the share of validation pairs whose implicit reward
  prefers the chosen answer).
- hh-sft (issue 47's fourth dataset): the same hh-rlhf-harmless pairs' preferred answers as chat for supervised
  fine-tuning (the SFT step of the SFT-then-DPO recipe): the first `--train-examples` lines of train.jsonl
  and `--eval-examples` of validation.jsonl as `input.messages` + `preferred_output`, the input's own
  assistant turns at weight 0 (loss on the preferred answer only, as Code Alpaca's and GSM8K's); lines
  longer than `--seq` tokens are left out and counted in the result's `data` entry (`skip_invalid`).
Wall-clock time is the sum of the optimizer steps' times (evaluation excluded). Each run writes one
JSON file to `--out` (existing files are skipped, so an interrupted grid resumes) with its commit, machine
and full configuration (`bench.common.results`), plus its run folder (metrics.jsonl,
selection_history.jsonl, adapter). A grid of many such commands is a data file under bench/grids/, run by
bench/run_grid.py.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common.paths import DATA
from bench.common.results import write_result
from lcsb_core.data import build_dataset, gsm8k_to_chat
from lcsb_core.eval.graders import grade_all, parse_graders
from lcsb_core.models.loading import load_tokenizer, resolve_model_path
from lcsb_core.models.modules import autocast_for
from lcsb_core.models.quantization import compute_dtype
from lcsb_core.training.callbacks import EvalReport, StepReport, TrainerCallback
from lcsb_core.training.config import LR_SCHEDULES, TrainConfig
from lcsb_core.training.setup import load_components
from lcsb_core.training.trainer import Trainer

# GSM8K exact match, scored by the product's graders (`lcsb_core.eval.graders`, what a job's `eval.graders`
# runs): `final_line`, the answer has GSM8K's final-answer line (`####` and a number right after it), and
# `numeric`, the product's numeric grader (the number after `####`, as a number, against the reference's).
# An answer is correct when both give 1.0: what this benchmark's own `####` regex scored until 2026-12-06
# (bench/LOG.md has the answers the two read differently).
GSM8K_GRADERS = parse_graders([{"type": "regex", "name": "final_line", "pattern": r"####\s*[-+\u2212]?\$?\.?\d"},
                               {"type": "numeric"}], "bench.quality.GSM8K_GRADERS")


def first_final_answer(text: str) -> str:
    """`text` up to its second `####`: a model that goes on past its final-answer line (another question, a
    second `####`) is graded on its first one, as the benchmark always did (the numeric grader reads the
    last `####`)."""
    head, mark, rest = text.partition("####")
    return head + mark + rest.split("####", 1)[0]


def gsm8k_grades(answers: list[str], references: list[str]) -> tuple[list[bool], dict[str, float]]:
    """Each generated answer scored against its GSM8K reference answer by `GSM8K_GRADERS` (on
    `first_final_answer`): (correct per answer: every grader gave 1.0, each grader's mean score
    {`grader/<name>`: mean})."""
    grades, means = grade_all(GSM8K_GRADERS, [first_final_answer(a) for a in answers], references)
    return [min(row.values()) == 1.0 for row in grades], means


@dataclass(frozen=True)
class RunSpec:
    """One training run of the grid."""

    task: str
    schedule: str
    seed: int
    lr: float
    steps: int
    momentum: bool = True
    repacking: bool = False
    quant: str = "nf4"
    fraction: float = 0.25
    full_every: int = 4
    batch: int = 4
    layer_lr_scaling: str = "none"
    deep_fraction: float = 0.25

    @property
    def label(self) -> str:
        """The schedule as a grid token: `topfull/4`, `cyclic@0.5`, `freeze` (see `parse_schedule`)."""
        return (self.schedule + (f"/{self.full_every}" if self.schedule == "topfull" else "")
                + (f"%{self.deep_fraction:g}" if self.schedule == "split" and self.deep_fraction != 0.25 else "")
                + (f"@{self.fraction:g}" if self.fraction != 0.25 and self.schedule != "full" else "")
                + {"none": "", "frequency": "+freq", "sqrt": "+sqrt"}[self.layer_lr_scaling])

    @property
    def name(self) -> str:
        every = f"N{self.full_every}" if self.schedule == "topfull" else ""
        return (f"{self.task}-{self.quant}-{self.schedule}{every}-f{self.fraction:g}-lr{self.lr:g}-s{self.seed}"
                f"-n{self.steps}-mom{int(self.momentum)}-repack{int(self.repacking)}"
                + (f"-b{self.batch}" if self.batch != 4 else "")
                + (f"-deep{self.deep_fraction:g}" if self.schedule == "split" else "")
                + {"none": "", "frequency": "-lrfreq", "sqrt": "-lrsqrt"}[self.layer_lr_scaling])


def parse_schedule(token: str, default_fraction: float) -> tuple[str, float, int, str, float]:
    """A grid token `name[/full_every][%deep_fraction][@fraction][+freq|+sqrt]` -> (schedule, fraction, full_every,
    layer_lr_scaling, deep_fraction); e.g. `topfull/2`, `cyclic@0.5`, `split%0.5`, `topfull/4+freq`.
    `full_every` only means something for `topfull` (default 4), `deep_fraction` for `split` (0.25);
    `+freq` is `layer_lr_scaling: frequency`, `+sqrt` is `sqrt`."""
    scaling = "frequency" if token.endswith("+freq") else "sqrt" if token.endswith("+sqrt") else "none"
    token = token.removesuffix("+freq").removesuffix("+sqrt")
    name, _, frac = token.partition("@")
    name, _, deep = name.partition("%")
    name, _, every = name.partition("/")
    return (name, float(frac) if frac else default_fraction, int(every) if every else 4,
            scaling, float(deep) if deep else 0.25)


class Recorder(TrainerCallback):
    """Collects per-step train loss/time and every evaluation with the training seconds spent so far;
    at the evaluations of `exact_match_steps` it also decodes the GSM8K questions (`exact_match`)."""

    def __init__(self, *, model=None, tokenizer=None, rows=None, exact_match_steps=(), args=None,
                 partial: Path | None = None, spec: RunSpec | None = None) -> None:
        self.partial, self.spec = partial, spec
        self.train_s = 0.0
        self.steps: list[dict] = []
        self.evals: list[dict] = []
        self.model, self.tokenizer, self.rows, self.args = model, tokenizer, rows, args
        self.exact_match_steps = set(exact_match_steps)

    def on_step(self, report: StepReport) -> None:
        self.train_s += report.step_time_s
        self.steps.append({"step": report.step, "loss": report.loss, "step_time_s": report.step_time_s,
                           "grad_norm": report.grad_norm, "peak_mib": report.peak_memory_mib, **report.rewards})

    def on_eval(self, report: EvalReport) -> None:
        self.evals.append({"step": report.step, "train_s": self.train_s, "eval_loss": report.eval_loss,
                           "eval_token_accuracy": report.eval_token_accuracy, **report.rewards})
        if report.step in self.exact_match_steps and self.rows:
            self.evals[-1].update(exact_match(self.model, self.tokenizer, self.rows, batch_size=self.args.gen_batch,
                                              max_new_tokens=self.args.max_new_tokens))
        if self.partial is not None and self.spec is not None:  # what a run killed by a time limit leaves
            self.partial.write_text(json.dumps({"spec": self.spec.__dict__, "name": self.spec.name, "partial": True,
                                                "label": self.spec.label, "train_seconds": self.train_s,
                                                "evals": self.evals, "steps": self.steps}))


def enable_cpu_weight_repacking(model: torch.nn.Module) -> int:
    """Undo `disable_cpu_weight_repacking`: reproduce bitsandbytes 0.50's default (NF4 weights repacked
    for CPU inference on the first eval-mode forward) to measure its effect. Returns modules changed."""
    import bitsandbytes as bnb
    from bitsandbytes.functional import has_avx512bf16

    on = bool(has_avx512bf16())
    n = 0
    for module in model.modules():
        if isinstance(module, bnb.nn.Linear4bit):
            module.support_avx512bf16_for_cpu = on
            n += on
    return n


def write_jsonl(path: Path, rows) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def gsm8k_prompt(question: str) -> str:
    """The prompt of a GSM8K question for a model without a chat template (prompt/completion data)."""
    return f"Question: {question}\nAnswer:"


def gsm8k_rows_for(tokenizer):
    """GSM8K row -> a training line: chat where the tokenizer has a chat template, else prompt/completion."""
    if getattr(tokenizer, "chat_template", None):
        return gsm8k_to_chat
    return lambda r: {"prompt": gsm8k_prompt(r["question"]), "completion": " " + r["answer"]}


def code_alpaca_to_chat(row: dict) -> dict:
    """A Code Alpaca row `{"instruction", "input", "output"}` -> one chat example: user = the instruction,
    plus a blank line and the input when there is one; assistant = the output (../shared/data/README.md
    leaves the recipe to the user; this is ours)."""
    user = row["instruction"] + (f"\n\n{row['input']}" if row.get("input") else "")
    return {"messages": [{"role": "user", "content": user}, {"role": "assistant", "content": row["output"]}]}


def code_alpaca_rows_for(tokenizer):
    """Code Alpaca row -> a training line: chat where the tokenizer has a chat template, else
    prompt/completion ("Instruction: ...\nResponse:" -> " <output>")."""
    if getattr(tokenizer, "chat_template", None):
        return code_alpaca_to_chat
    return lambda r: {"prompt": "Instruction: " + code_alpaca_to_chat(r)["messages"][0]["content"] + "\nResponse:",
                      "completion": " " + r["output"]}


def hh_preferred_to_chat(pair: dict) -> dict:
    """An hh-rlhf-harmless preference line -> a chat line of its preferred answer: the input's messages (its
    assistant turns at weight 0) and the preferred output, the one message trained on."""
    turns = [{**m, "weight": 0} if m["role"] == "assistant" else m for m in pair["input"]["messages"]]
    return {"messages": turns + list(pair["preferred_output"])}


def hh_datasets(work: Path, tokenizer, args, stem: str, convert) -> tuple:
    """(train, eval TokenizedDataset, (train lines read, eval lines read)) of the first `--train-examples`
    lines of hh-rlhf-harmless's train.jsonl and `--eval-examples` of its validation.jsonl, each line passed
    through `convert` and written to `<work>/<stem>_train.jsonl` / `_eval.jsonl`; lines longer than `--seq`
    tokens are left out (`skip_invalid`), so the caller counts what was kept against what was read."""
    read = []
    for name, n, side in (("train.jsonl", args.train_examples, "train"), ("validation.jsonl", args.eval_examples,
                                                                          "eval")):
        lines = (DATA / "hh-rlhf-harmless" / name).read_text().splitlines()[:n]
        write_jsonl(work / f"{stem}_{side}.jsonl", (convert(json.loads(line)) for line in lines))
        read.append(len(lines))
    build = lambda f: build_dataset(work / f, tokenizer, max_seq_len=args.seq, min_examples=1,  # noqa: E731
                                    skip_invalid=True)
    return build(f"{stem}_train.jsonl"), build(f"{stem}_eval.jsonl"), tuple(read)


def prepare_task(task: str, tokenizer, args) -> tuple:
    """(train TokenizedDataset, eval TokenizedDataset, eval rows for exact match or None)."""
    work = Path(args.out) / "data"
    if task == "gsm8k":
        read = lambda name, n: [json.loads(x) for x in (DATA / "gsm8k" / name).read_text().splitlines()[:n]]  # noqa: E731
        train_rows, eval_rows = read("train.jsonl", args.train_examples), read("test.jsonl", args.eval_examples)
        to_line = gsm8k_rows_for(tokenizer)
        train_file = write_jsonl(work / "gsm8k_train.jsonl", map(to_line, train_rows))
        eval_file = write_jsonl(work / "gsm8k_eval.jsonl", map(to_line, eval_rows))
        # the trainer evaluates shortest first (less padding), whatever the file's order
        build = lambda f: build_dataset(f, tokenizer, max_seq_len=args.seq, min_examples=1)  # noqa: E731
        return build(train_file), build(eval_file), eval_rows
    if task == "code-alpaca":
        folder = DATA / "code-alpaca"
        read = lambda name, n: [json.loads(x) for x in (folder / name).read_text().splitlines()[:n]]  # noqa: E731
        to_line = code_alpaca_rows_for(tokenizer)
        # rows with an empty output would be an empty training target, which the validator refuses (2 of the
        # 1,817 training rows, lines 1587 and 1797); they are left out here, by name, before the cut
        train_rows = [r for r in read("train.jsonl", None) if r["output"].strip()][: args.train_examples]
        eval_rows = [r for r in read("validation.jsonl", None) if r["output"].strip()][: args.eval_examples]
        train_file = write_jsonl(work / "code_alpaca_train.jsonl", map(to_line, train_rows))
        eval_file = write_jsonl(work / "code_alpaca_eval.jsonl", map(to_line, eval_rows))
        build = lambda f: build_dataset(f, tokenizer, max_seq_len=args.seq, min_examples=1)  # noqa: E731
        return build(train_file), build(eval_file), None
    if task == "wikitext":
        lines = (DATA / "wikitext-2" / "valid.txt").read_text().splitlines(keepends=True)
        cut = int(len(lines) * 0.8)
        while cut < len(lines) and not lines[cut].lstrip().startswith("= "):  # cut before a heading
            cut += 1
        (work).mkdir(parents=True, exist_ok=True)
        (work / "wikitext_train.txt").write_text("".join(lines[:cut]))
        (work / "wikitext_heldout.txt").write_text("".join(lines[cut:]))
        build = lambda f: build_dataset(work / f, tokenizer, max_seq_len=args.seq, min_examples=1)  # noqa: E731
        train, held = build("wikitext_train.txt"), build("wikitext_heldout.txt")
        held.examples = held.examples[: args.eval_examples]  # blocks of equal length: no padding
        return train, held, None
    if task == "hh-rlhf":
        train, evals, read = hh_datasets(work, tokenizer, args, "hh", lambda pair: pair)
        args.data_counts = {"train_pairs_read": read[0], "train_pairs": len(train.examples) // 2,
                            "eval_pairs_read": read[1], "eval_pairs": len(evals.examples) // 2}
        return train, evals, None
    if task == "hh-sft":
        train, evals, read = hh_datasets(work, tokenizer, args, "hh_sft", hh_preferred_to_chat)
        args.data_counts = {"train_lines_read": read[0], "train_examples": len(train.examples),
                            "eval_lines_read": read[1], "eval_examples": len(evals.examples)}
        return train, evals, None
    raise SystemExit(f"--task: unknown task {task!r} (gsm8k, code-alpaca, wikitext, hh-rlhf, hh-sft)")


@torch.no_grad()
def exact_match(model, tokenizer, rows: list[dict], *, batch_size: int, max_new_tokens: int) -> dict:
    """Greedy-decode each GSM8K question (chat template, generation prompt) and score its `####` answer with
    the product's graders (`gsm8k_grades`). Returns accuracy, the count, each grader's mean
    (`exact_match_graders`), and the first few generations."""
    model.eval()
    tokenizer.padding_side = "left"
    eos = [tokenizer.eos_token_id]
    if tokenizer.chat_template:
        eos.append(tokenizer.convert_tokens_to_ids("<|im_end|>"))
    answers: list[str] = []
    t0 = time.perf_counter()
    for start in range(0, len(rows), batch_size):
        chunk = rows[start:start + batch_size]
        if tokenizer.chat_template:
            prompts = [tokenizer.apply_chat_template([{"role": "user", "content": r["question"]}], tokenize=False,
                                                     add_generation_prompt=True) for r in chunk]
        else:  # the prompt/completion rows of `gsm8k_rows_for`, after the BOS token
            prompts = [(tokenizer.bos_token or "") + gsm8k_prompt(r["question"]) for r in chunk]
        enc = tokenizer(prompts, return_tensors="pt", padding=True, add_special_tokens=False).to(model.device)
        with autocast_for(model):
            out = model.generate(**enc, max_new_tokens=max_new_tokens, do_sample=False, eos_token_id=eos,
                                 pad_token_id=tokenizer.pad_token_id)
        answers += tokenizer.batch_decode(out[:, enc["input_ids"].shape[1]:], skip_special_tokens=True)
    model.train()
    oks, means = gsm8k_grades(answers, [row["answer"] for row in rows])
    samples = [{"question": row["question"][:200], "generated": text[-300:], "correct": ok}
               for row, text, ok in list(zip(rows, answers, oks, strict=True))[:3]]
    return {"exact_match": sum(oks) / len(rows), "exact_match_correct": sum(oks), "exact_match_n": len(rows),
            "exact_match_graders": means, "exact_match_seconds": time.perf_counter() - t0, "samples": samples}


def run_one(spec: RunSpec, data: tuple, args, step0_cache: dict) -> dict:
    """Train one `spec`; return its curves and final metrics."""
    train_ds, eval_ds, eval_rows = data
    cfg = TrainConfig.from_dict({
        "data": {"train_file": "(in memory)", "max_seq_len": args.seq, "group_by_length": args.group_by_length},
        "model": {"name_or_path": args.model, "quantization": spec.quant, "device": args.device},
        "lora": {"rank": 16, "alpha": 32, "dropout": 0.0},
        "lcsb": {"schedule": spec.schedule, "fraction": spec.fraction, "momentum_for_skipped": spec.momentum,
                 "full_every": spec.full_every if spec.schedule == "topfull" else None,
                 "deep_fraction": spec.deep_fraction if spec.schedule == "split" else None,
                 "layer_lr_scaling": spec.layer_lr_scaling},
        "optim": {"learning_rate": spec.lr, "warmup_steps": args.warmup, "lr_schedule": args.lr_schedule},
        "batch_size": spec.batch, "max_steps": spec.steps, "seed": spec.seed, "eval_every": args.eval_every,
        "log_every": 1, "output_dir": str(Path(args.out) / "runs" / spec.name),
        "dpo": {"beta": args.beta} if spec.task == "hh-rlhf" else None,
    })
    model, tokenizer, device = load_components(cfg)
    if spec.repacking:
        enable_cpu_weight_repacking(model)
    em_steps = set()
    if args.exact_match and spec.seed in args.exact_match_seeds and spec.label in args.exact_match_schedules:
        em_steps = {args.steps} | ({0} if not step0_cache.get("exact_match_base_done") else set())
        step0_cache["exact_match_base_done"] = True
    recorder = Recorder(model=model, tokenizer=tokenizer, rows=eval_rows, exact_match_steps=em_steps, args=args,
                        partial=Path(args.out) / f"{spec.name}.partial.json", spec=spec)
    trainer = CachedStep0Trainer(cfg, callbacks=[recorder], model=model, tokenizer=tokenizer, device=device,
                                 train_dataset=train_ds, eval_dataset=eval_ds)
    # The step-0 eval is the base model's (LoRA B = 0): the same for every run with the same base, so
    # it is computed once per (task, quant); runs that reproduce the repacking bug evaluate for real,
    # because that first eval-mode forward is what repacks the weights.
    trainer.step0 = None if spec.repacking else step0_cache.get((spec.task, spec.quant))
    summary = trainer.train()
    step0_cache.setdefault((spec.task, spec.quant), trainer.step0_report)
    result = {"spec": spec.__dict__, "name": spec.name, "label": spec.label, "k": trainer.k,
              "cycle_length": trainer.schedule.cycle_length, "num_layers": trainer.selective.num_layers,
              "train_seconds": recorder.train_s, "evals": recorder.evals, "steps": recorder.steps,
              "peak_memory_mib": summary["peak_memory_mib"], "run_dir": summary["run_dir"],
              "threads": torch.get_num_threads(), "torch": torch.__version__, "model": args.model,
              "compute_dtype": str(compute_dtype(torch.device("cpu"))).removeprefix("torch."),
              "cpu_capability": torch.backends.cpu.get_cpu_capability(),
              "layer_grad_norms": layer_grad_norms(Path(summary["run_dir"])),
              "schedule_decision": trainer.schedule.decision(), "data": getattr(args, "data_counts", None)}
    return result


def layer_grad_norms(run_dir: Path) -> list[list[float | None]]:
    """Per optimizer step, each decoder layer's LoRA gradient L2 norm (None where the layer was not
    trained that step), from the run's `selection_history.jsonl` (`lcsb_core.training.history`): what issue 47's
    lower-layer share is computed from (`bench/quality_report.py shares`)."""
    path = run_dir / "selection_history.jsonl"
    return [json.loads(line)["grad_norm"] for line in path.read_text().splitlines() if line.strip()]


class CachedStep0Trainer(Trainer):
    """A Trainer that can reuse a previously measured step-0 evaluation (see `run_one`)."""

    step0: EvalReport | None = None
    step0_report: EvalReport | None = None

    def evaluate(self, step: int) -> EvalReport:
        if step == 0 and self.step0 is not None:
            report = self.step0
            self.run.eval_history.append(report)
            self.files.append(self.files.metrics, {"split": "eval", **report.to_dict()})
            self._emit("on_eval", report)
        else:
            report = super().evaluate(step)
        if step == 0:
            self.step0_report = report
        return report


def grid(args) -> list[RunSpec]:
    extend = dict(x.split("=") for x in args.extend.split(",") if x)
    specs = []
    for seed, lr, sched, mom, rep, quant in itertools.product(
            map(int, args.seeds.split(",")), map(float, args.lrs.split(",")), args.schedules.split(","),
            [m == "on" for m in args.momentum.split(",")], [r == "on" for r in args.bnb_cpu_repacking.split(",")],
            args.quant.split(",")):
        name, fraction, full_every, scaling, deep = parse_schedule(sched, args.fraction)
        steps = int(extend.get(sched, args.steps))
        specs.append(RunSpec(args.task, name, seed, lr, steps, mom, rep, quant, fraction, full_every, args.batch,
                             scaling, deep))
    return specs


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The options of this module's command line (see `--help`), parsed; the exact-match seeds and schedules
    as sets."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
                                 allow_abbrev=False)  # a grid file must spell each option out
    ap.add_argument("--task", default="gsm8k", choices=["gsm8k", "code-alpaca", "wikitext", "hh-rlhf", "hh-sft"])
    ap.add_argument("--beta", type=float, default=0.1, help="DPO's beta (task hh-rlhf)")
    ap.add_argument("--schedules", default="full,freeze,cyclic,random",
                    help="comma-separated tokens name[/full_every][%%deep_fraction][@fraction][+freq|+sqrt], "
                         "e.g. topfull/2,cyclic@0.5,split%%0.5,topfull/4+freq")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--lrs", default="2e-4")
    ap.add_argument("--momentum", default="on", help="momentum_for_skipped: on, off or on,off")
    ap.add_argument("--bnb-cpu-repacking", default="off", help="off, on or off,on (on reproduces the bnb bug)")
    ap.add_argument("--quant", default="nf4")
    ap.add_argument("--fraction", type=float, default=0.25, help="k as a fraction of the decoder layers")
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--extend", default="", help="per-schedule step counts, e.g. cyclic=100,topfull/2=48 "
                    "(equal-time view)")
    ap.add_argument("--group-by-length", action="store_true", help="data.group_by_length: batches of similar length")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--lr-schedule", default="constant", choices=LR_SCHEDULES,
                    help="optim.lr_schedule after the warmup (constant: a longer run's first steps are a "
                         "shorter one's)")
    ap.add_argument("--eval-every", type=int, default=20)
    ap.add_argument("--batch", type=int, default=4, help="examples (gsm8k) or blocks (wikitext) per step")
    ap.add_argument("--seq", type=int, default=384, help="max tokens per example (gsm8k) or block (wikitext)")
    ap.add_argument("--train-examples", type=int, default=2000)
    ap.add_argument("--eval-examples", type=int, default=200)
    ap.add_argument("--exact-match", action="store_true",
                    help="greedy-decode the eval questions at step 0 (once) and at --steps (gsm8k)")
    ap.add_argument("--exact-match-seeds", default="0")
    ap.add_argument("--exact-match-schedules", default="full,cyclic,freeze,random")
    ap.add_argument("--gen-batch", type=int, default=40)
    ap.add_argument("--max-new-tokens", type=int, default=256)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--model", default="SmolLM2-135M-Instruct",
                    help="catalog model (SmolLM2-135M-Instruct, gemma-3-270m) or a model folder; give each model "
                         "its own --out (run names do not include the model)")
    ap.add_argument("--threads", type=int, default=0,
                    help="torch threads on CPU (0 = torch default; 1 when other jobs share the cores: OpenMP "
                         "barriers under oversubscription made small matmuls ~30x slower here)")
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    args.exact_match_seeds = {int(x) for x in args.exact_match_seeds.split(",")}
    args.exact_match_schedules = set(args.exact_match_schedules.split(","))
    return args


def run_config(args: argparse.Namespace, spec: RunSpec) -> dict:
    """The full configuration of one run, as its result file records it: every option (sets as sorted
    lists) and the run's own `spec`."""
    options = {k: sorted(v) if isinstance(v, set) else v for k, v in vars(args).items()}
    return {"runner": "quality", "options": options, "spec": spec.__dict__}


class QualityRunner:
    """Trains the runs of one set of options: the tokenizer and the task's data are loaded at the first
    run and kept, and the base model's step-0 evaluation is measured once per (task, quantization)."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.data: tuple | None = None
        self.step0_cache: dict = {}

    def train(self, spec: RunSpec) -> dict:
        """Train `spec`; its curves and final metrics (`run_one`)."""
        if self.data is None:
            tokenizer = load_tokenizer(resolve_model_path(self.args.model))
            self.data = prepare_task(self.args.task, tokenizer, self.args)
        return run_one(spec, self.data, self.args, self.step0_cache)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    specs = grid(args)
    todo = [s for s in specs if not (out / f"{s.name}.json").exists()]
    print(f"{len(specs)} runs, {len(todo)} to do -> {out}", flush=True)
    runner = QualityRunner(args)
    for spec in todo:
        if (out / f"{spec.name}.json").exists():  # finished meanwhile by another process on the same grid
            continue
        started, load = datetime.now(UTC), list(os.getloadavg())
        result = runner.train(spec)
        write_result(out / f"{spec.name}.json", result, run_config(args, spec), started=started, load_before=load)
        (out / f"{spec.name}.partial.json").unlink(missing_ok=True)
        ev = result["evals"]
        print(f"{spec.name}: eval {ev[0]['eval_loss']:.4f} -> {ev[-1]['eval_loss']:.4f}, "
              f"train {result['train_seconds']:.0f} s"
              + "".join(f", exact match @{e['step']} {e['exact_match']:.3f}" for e in ev if "exact_match" in e)
              + f", wall {(datetime.now(UTC) - started).total_seconds():.0f} s", flush=True)

if __name__ == "__main__":
    main()
