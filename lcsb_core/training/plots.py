"""Plots of a run folder, as PNG (matplotlib, Agg backend): the loss curve (train loss per step and
eval loss) and a layer-by-step heatmap of the selection history (selected layers coloured by their
LoRA gradient norm)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

from lcsb_core.training.history import read_history


def plot_loss(metrics_path: Path, out: Path) -> Path:
    """Train loss vs step and eval loss vs step from `metrics.jsonl`."""
    rows = [json.loads(line) for line in metrics_path.read_text().splitlines() if line.strip()]
    train = [(r["step"], r["loss"]) for r in rows if r["split"] == "train"]
    evals = [(r["step"], r["eval_loss"]) for r in rows if r["split"] == "eval"]
    fig, ax = plt.subplots(figsize=(7, 4))
    if train:
        ax.plot(*zip(*train, strict=True), label="train loss", alpha=0.7)
    if evals:
        ax.plot(*zip(*evals, strict=True), "o-", label="eval loss")
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("loss (nats / target token)")
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out


def plot_selection_heatmap(history_path: Path, out: Path) -> Path:
    """Decoder layer (rows) x step (columns); selected cells show log10 of the LoRA gradient norm,
    skipped cells are blank."""
    rows = read_history(history_path)
    num_layers = len(rows[0]["grad_norm"]) if rows else 0
    grid = np.full((num_layers, len(rows)), np.nan)
    for col, row in enumerate(rows):
        for layer, g in enumerate(row["grad_norm"]):
            if g is not None:
                grid[layer, col] = math.log10(max(g, 1e-12))
    fig, ax = plt.subplots(figsize=(max(6, min(16, len(rows) / 8)), 4))
    im = ax.imshow(grid, aspect="auto", origin="lower", interpolation="nearest", cmap="viridis")
    fig.colorbar(im, ax=ax, label="log10 LoRA grad norm (selected)")
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("decoder layer")
    ax.set_title("layer selection per step")
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out


def write_plots(files) -> list[Path]:
    """Write `loss.png` and `selection_heatmap.png` under the run's `plots/`; returns their paths."""
    files.plots.mkdir(parents=True, exist_ok=True)
    out = []
    if files.metrics.exists():
        out.append(plot_loss(files.metrics, files.plots / "loss.png"))
    if files.history.exists():
        out.append(plot_selection_heatmap(files.history, files.plots / "selection_heatmap.png"))
    return out
