"""`lcsb` command line for the trainer core (typer + rich).

    lcsb train job.yaml                      # train locally; progress bar; prints the output folder
    lcsb train job.yaml --set lcsb.k=4 --set max_steps=20
    lcsb train job.yaml --resume             # continue from the run folder's latest checkpoint
    lcsb import-gguf [NAME]                  # import a catalog model (default SmolLM2-135M-Instruct) once
    lcsb base-gguf NAME                      # print the path of its shipped GGUF (adapter.gguf's base)
    lcsb estimate-memory job.yaml            # predicted peak memory (MiB)
    lcsb gsm8k-to-chat in.jsonl out.jsonl --limit 500
"""

from __future__ import annotations

import json
from pathlib import Path

import typer
import yaml
from rich.console import Console
from rich.progress import BarColumn, Progress, TaskID, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from lcsb_core.errors import LCSBError
from lcsb_core.training.callbacks import EvalProgress, EvalReport, StepReport, TrainerCallback
from lcsb_core.training.config import TrainConfig


def _quiet() -> None:
    """Hide library chatter (weight-loading bars, deprecation notes) so the progress bar reads clean."""
    import logging
    import warnings

    warnings.filterwarnings("ignore", category=FutureWarning)
    logging.getLogger("bitsandbytes").setLevel(logging.ERROR)
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()


app = typer.Typer(add_completion=False, help="LCSB: LoRA fine-tuning with layer-cyclic selective backprop.")
console = Console(stderr=True)


def load_config(path: Path, overrides: list[str]) -> TrainConfig:
    """YAML file + `a.b=value` overrides (values parsed as YAML) -> TrainConfig."""
    raw = yaml.safe_load(path.read_text()) or {}
    for item in overrides:
        key, _, value = item.partition("=")
        node = raw
        *parents, leaf = key.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = yaml.safe_load(value)
    return TrainConfig.from_dict(raw)


class ProgressCallback(TrainerCallback):
    """A rich progress bar with loss, learning rate, tokens/s and peak memory."""

    def __init__(self, progress: Progress):
        self.progress = progress
        self.task = TaskID(0)  # set by on_start

    def on_start(self, info: dict) -> None:
        for key in ("train_data", "eval_data"):
            if key in info:
                self.progress.console.print(f"{key.replace('_', ' ')}: {info[key]}")
        self.progress.console.print(f"schedule: {info['schedule_description']}; learning rate "
                                    f"{info['learning_rate']:.3g} after {info['warmup_steps']} warmup steps",
                                    highlight=False)
        self.task = self.progress.add_task("train", total=info["total_steps"], completed=info["start_step"], stats="")

    def on_step(self, r: StepReport) -> None:
        stats = f"loss {r.loss:.3f}  lr {r.lr:.2e}  {r.tokens_per_s:,.0f} tok/s  peak {r.peak_memory_mib:,.0f} MiB"
        self.progress.update(self.task, completed=r.step, stats=stats)

    def on_eval_progress(self, p: EvalProgress) -> None:
        self.progress.update(self.task, stats=f"evaluating: {p.batches_done}/{p.batches_total} validation batches")

    def on_eval(self, r: EvalReport) -> None:
        self.progress.console.print(f"eval @ step {r.step}: loss {r.eval_loss:.4f}, "
                                    f"token accuracy {r.eval_token_accuracy:.3f}")


@app.command()
def train(config: Path = typer.Argument(..., exists=True, help="YAML job spec"),
          set_: list[str] = typer.Option([], "--set", help="override a field, e.g. --set lcsb.k=4"),
          resume: bool = typer.Option(False, help="resume from the latest checkpoint in output_dir")) -> None:
    """Train a LoRA adapter with LCSB and print where the outputs are."""
    from lcsb_core.training.trainer import Trainer

    _quiet()
    try:
        cfg = load_config(config, set_)
        cfg.check_honoured()  # before the model loads, not after
        columns = [TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
                   TimeElapsedColumn(), TimeRemainingColumn(), TextColumn("{task.fields[stats]}")]
        with Progress(*columns, console=console) as progress:
            trainer = Trainer(cfg, callbacks=[ProgressCallback(progress)])
            summary = trainer.train(resume_from="latest" if resume else None)
    except LCSBError as exc:
        console.print(f"[red]error ({exc.code}):[/red] {exc}")
        raise typer.Exit(2) from None
    print(json.dumps(summary, indent=2))  # stdout, so `lcsb train job.yaml > summary.json` works


@app.command("import-gguf")
def import_gguf(name: str = typer.Argument("SmolLM2-135M-Instruct",
                                           help="catalog model: SmolLM2-135M-Instruct or gemma-3-270m")) -> None:
    """Import a catalog base model from its PyPI package into the model cache (once; a no-op after)."""
    import time

    from lcsb_core.models.gguf_import import ensure_model

    _quiet()
    start = time.perf_counter()
    try:
        folder = ensure_model(name)
    except LCSBError as exc:
        console.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(2) from None
    console.print(f"model folder: {folder} ({time.perf_counter() - start:.0f} s)")


@app.command("base-gguf")
def base_gguf(name: str = typer.Argument(..., help="catalog model: SmolLM2-135M-Instruct or gemma-3-270m"),
              out: Path | None = typer.Option(None, "--out", "-o", file_okay=False,
                                              help="folder for a GGUF assembled from chunk packages (Gemma; "
                                                   "default ~/.cache/lcsb/gguf)")) -> None:
    """Print the path of a catalog model's shipped GGUF, hash-checked (Gemma's assembled from its chunk
    packages): the exact base an export's adapter.gguf is for, e.g.
    `llama-cli -m "$(lcsb base-gguf NAME)" --lora adapter.gguf`. Torch-free; nothing is downloaded."""
    from lcsb_core.models.gguf_import import base_gguf_file

    try:
        path = base_gguf_file(name, out)
    except LCSBError as exc:
        console.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(2) from None
    print(path)


@app.command("export")
def export(run_dir: Path = typer.Argument(..., exists=True, file_okay=False, help="a run folder (output_dir)"),
           format_: list[str] = typer.Option([], "--format", "-f",
                                             help="adapter, merged-f16, merged-q8_0, merged-q4_1 (repeat; default "
                                                  "adapter, merged-f16, merged-q8_0)"),
           checkpoint: int | None = typer.Option(None, "--checkpoint", help="export this checkpoint step's adapter"),
           out: Path | None = typer.Option(None, "--out", "-o", file_okay=False,
                                           help="folder to write (default <run_dir>/export)"),
           data_format: str | None = typer.Option(None, "--data-format",
                                                  help="chat, prompt_completion or text (default: read from the "
                                                       "run's training file)")) -> None:
    """Export a run's LoRA for llama.cpp and Ollama: adapter.gguf, merged GGUF files, Modelfile, README,
    manifest (`lcsb_core.export`; no torch, nothing from a model hub)."""
    from lcsb_core.export.run import export_run

    try:
        result = export_run(run_dir, out or run_dir / "export", formats=format_ or None, checkpoint_step=checkpoint,
                            data_format=data_format)
    except LCSBError as exc:
        console.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(2) from None
    for path in [*result.files.values(), *result.extra]:
        print(path)
    console.print(f"exported in {result.seconds:.1f} s", highlight=False)


@app.command("estimate-memory")
def estimate_memory(config: Path = typer.Argument(..., exists=True),
                    set_: list[str] = typer.Option([], "--set")) -> None:
    """Predicted peak memory of a job (MiB), by component."""
    from lcsb_core.training.memory import estimate_for_config

    try:
        est = estimate_for_config(load_config(config, set_))
    except LCSBError as exc:
        console.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(2) from None
    console.print_json(json.dumps(est.to_dict()))


@app.command("gsm8k-to-chat")
def gsm8k_to_chat(src: Path = typer.Argument(..., exists=True), dst: Path = typer.Argument(...),
                  limit: int = typer.Option(0, help="first N rows only (0 = all)"),
                  offset: int = typer.Option(0, help="skip the first N rows"),
                  task: str = typer.Option("solution", help="solution: the assistant writes the worked solution; "
                                           "final-answer: it reads the final number off a given solution")) -> None:
    """Convert GSM8K rows ({"question", "answer"}) to chat JSONL."""
    from lcsb_core.data import gsm8k_final_answer, gsm8k_to_chat

    tasks = {"solution": gsm8k_to_chat, "final-answer": gsm8k_final_answer}
    if task not in tasks:
        raise typer.BadParameter(f"one of {', '.join(tasks)}", param_hint="--task")
    convert = tasks[task]

    dst.parent.mkdir(parents=True, exist_ok=True)
    n = 0
    with open(src) as fin, open(dst, "w") as fout:
        for i, line in enumerate(fin):
            if i < offset or not line.strip():
                continue
            if limit and n >= limit:
                break
            fout.write(json.dumps(convert(json.loads(line))) + "\n")
            n += 1
    console.print(f"wrote {n} chat examples to {dst}")


if __name__ == "__main__":
    app()
