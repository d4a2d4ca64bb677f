"""The run folder's layout and its append-only JSONL logs.

    <run>/config.json              resolved TrainConfig + model facts
    <run>/metrics.jsonl, .csv      train rows ("split": "train") and eval rows ("split": "eval")
    <run>/selection_history.jsonl  one row per optimizer step (see lcsb_core.training.history)
    <run>/checkpoints/step-<N>/    PEFT adapter + trainer_state.pt, every `save_every` steps and after the
                                   last step that ran (also when early stopping ended the run)
    <run>/adapter/                 the delivered PEFT adapter (adapter_config.json + adapter_model.safetensors):
                                   the last step's, or with select_checkpoint best the selected step's
    <run>/plots/*.png              loss curve, selection heatmap
    <run>/summary.json             final numbers
    <run>/eval_samples/step-<N>.jsonl  graded evaluation: each sample's prompt, reference, base and current
                                   answers and their grades (lcsb_core.eval.graded), per evaluation step
    <run>/eval_samples.jsonl       a copy of the latest of them
"""

from __future__ import annotations

import csv
import json
from pathlib import Path


class RunFiles:
    """Paths and writers of one run folder."""

    def __init__(self, root: str | Path):
        self.root = Path(root)
        self.config = self.root / "config.json"
        self.metrics = self.root / "metrics.jsonl"
        self.metrics_csv = self.root / "metrics.csv"
        self.history = self.root / "selection_history.jsonl"
        self.checkpoints = self.root / "checkpoints"
        self.adapter = self.root / "adapter"
        self.plots = self.root / "plots"
        self.summary = self.root / "summary.json"
        self.eval_samples = self.root / "eval_samples.jsonl"
        self.eval_samples_dir = self.root / "eval_samples"

    def create(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)

    def checkpoint_dir(self, step: int) -> Path:
        return self.checkpoints / f"step-{step:06d}"

    def latest_checkpoint(self) -> Path | None:
        """The checkpoint with the most steps, or None."""
        found = sorted(self.checkpoints.glob("step-*/trainer_state.pt")) if self.checkpoints.is_dir() else []
        return found[-1].parent if found else None

    @staticmethod
    def append(path: Path, row: dict) -> None:
        with open(path, "a") as fh:
            fh.write(json.dumps(row) + "\n")

    @staticmethod
    def write_json(path: Path, data: dict) -> None:
        path.write_text(json.dumps(data, indent=2, default=str) + "\n")

    @staticmethod
    def truncate_after(path: Path, step: int) -> None:
        """Drop rows whose `step` is > `step` (a resumed run rewrites them)."""
        if not path.exists():
            return
        rows = [line for line in path.read_text().splitlines() if line.strip()]
        keep = [r for r in rows if json.loads(r)["step"] <= step]
        path.write_text("".join(r + "\n" for r in keep))

    def write_metrics_csv(self) -> None:
        """Metrics JSONL -> CSV with the union of columns (list values joined with spaces)."""
        if not self.metrics.exists():
            return
        rows = [json.loads(line) for line in self.metrics.read_text().splitlines() if line.strip()]
        columns: list[str] = []
        for row in rows:
            columns.extend(k for k in row if k not in columns)
        with open(self.metrics_csv, "w", newline="") as fh:
            writer = csv.DictWriter(fh, fieldnames=columns)
            writer.writeheader()
            for row in rows:
                writer.writerow({k: " ".join(map(str, v)) if isinstance(v, list) else v for k, v in row.items()})
