"""How many optimizer steps a run makes: the one count the trainer loops to, the service checks a job's
settings against at creation (from the upload's example count) and the worker re-checks after the
model's tokenizer has dropped what it must. Pure Python, no torch.

    planned_steps(n_examples=45, batch_size=4, grad_accum=1, n_epochs=3, max_steps=None)   # 36

How the trainer counts (`lcsb_core.training.trainer`, `lcsb_core.data.iter_batches`): an epoch is
ceil(n_examples / batch_size) micro-batches, the last, partial one kept (no drop_last); packing
(`data.pack`) only changes how each micro-batch's examples are laid out in rows, never how many
micro-batches there are; a `.txt` corpus's examples are its packed blocks (`report.usable_examples`).
A step takes `grad_accum` micro-batches, so `n_epochs` epochs make
max(1, floor(floor(n_epochs x batches per epoch) / grad_accum)) steps (micro-batches left over at the
end are not trained on; a run shorter than one step still makes one, reading into the next epoch).
`max_steps` caps that; with `max_steps` and no `n_epochs` the run is `max_steps` long (the data
repeats); with neither, one epoch.
"""

from __future__ import annotations

import math


def batches_per_epoch(n_examples: int, batch_size: int) -> int:
    """Micro-batches in one epoch: one per `batch_size` examples, the last partial one kept."""
    return math.ceil(n_examples / batch_size)


def planned_steps(n_examples: int, batch_size: int, grad_accum: int, n_epochs: float | None,
                  max_steps: int | None) -> int:
    """The number of optimizer steps a run makes (see the module docstring for the counting rule).

    Args:
        n_examples: training examples the run iterates over (after the tokenizer's drops; packed
            blocks for a `.txt` corpus). Unused when only `max_steps` bounds the run.
        batch_size: examples per micro-batch. grad_accum: micro-batches per optimizer step.
        n_epochs: passes over the data (may be fractional); None: unbounded by epochs when
            `max_steps` is given, else one epoch.
        max_steps: cap on optimizer steps, or None.

    Raises:
        ValueError: batch_size, grad_accum, max_steps or n_epochs out of range, or fewer than one
            example for a run bounded by epochs.
    """
    if batch_size < 1 or grad_accum < 1:
        raise ValueError(f"batch_size and grad_accum must be >= 1, got {batch_size} and {grad_accum}")
    if max_steps is not None and max_steps < 1:
        raise ValueError(f"max_steps must be >= 1, got {max_steps}")
    if n_epochs is None and max_steps is None:
        n_epochs = 1.0
    if n_epochs is None:
        return max_steps  # type: ignore[return-value]  # not None here
    if n_epochs <= 0 or n_examples < 1:
        raise ValueError(f"an epoch-bound run needs n_epochs > 0 and at least one example, got {n_epochs} "
                         f"and {n_examples}")
    by_epochs = max(1, int(n_epochs * batches_per_epoch(n_examples, batch_size)) // grad_accum)
    return by_epochs if max_steps is None else min(max_steps, by_epochs)
