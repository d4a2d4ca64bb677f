"""Layer-selection schedules: which decoder layers are trained (their LoRA parameters get gradients) at
each optimizer step, and what happens to the others. The one place that says what a schedule name means.

A schedule is a small object (no torch) of the type `Schedule` (a runtime-checkable protocol; every
class derives its shared members from `BaseSchedule`: the pure ones as frozen `PureSchedule`
dataclasses, `importance` as a mutable one): `layers_for_step(step) -> frozenset[int]` with 0-based
decoder-layer indices (0 = nearest the embeddings), the same answer for the same (step, seed) every
time, so a resumed run selects exactly what an uninterrupted one would. Each class also states its
facts, which the trainer, the memory estimate and the service read instead of comparing names:

- `identity_skip`: True for the paper's LCSB (Park et al., arXiv 2602.13073, Sec. 3): a layer that is
  not trained but lies above a trained one runs without autograd and is the identity in backward
  (`h_out = h_in + stop_gradient(f(h_in) - h_in)`), so trained layers below it get a *surrogate*
  gradient. False for the exact-gradient schedules: untrained layers are frozen (LoRA parameters
  without grad) but back-propagated through exactly, so every trained layer gets its true gradient.
- `backprop_layers(step)`: the layers whose backward runs at that step (what a step costs and which
  activations it keeps). Under exact gradients that is every layer from the lowest trained one to the
  top; below the lowest trained layer nothing requires grad, so autograd records nothing there.
- `cycle_length`: steps after which the selection pattern repeats (every layer reached once, for the
  cycling schedules); benchmarks read schedules at whole cycles.
- `full_every`: steps between full backward passes (`topfull`), None for every other schedule.
- `deep_fraction`: `split` only (None for the others): the share of each step's examples that
  back-propagate through every layer; the rest back-propagate through the top k only
  (`lcsb_core.training.step.run_step` splits the batch by examples). The layers below the top k then get an
  exact gradient of those examples every step, instead of the whole batch's every N-th step as in
  `topfull`, for the same backward work (`deep_fraction` 1/N), and the activation peak is never the
  whole batch's through all layers: the larger of the deep rows' through all L and the other rows'
  through the top k (`lcsb_core.training.memory.depth_split_for`).
- `update_shares()`: per layer, the share of a cycle's step-examples that back-propagate into it (1.0
  for a layer trained on every example of every step; `split`'s lower layers: `deep_fraction`);
  `lcsb_core.training.optim.layer_lr_scales` scales a layer's learning rate by its inverse (`frequency`) or
  inverse square root (`sqrt`) when `layer_lr_scaling` asks for it.

The rules of the schedule fields' own values are stated once, here (`check_schedule`,
`check_k_or_fraction`, `check_full_every`), and applied by `LCSBSettings` and `make_schedule`; the
defaults live here too (`DEFAULT_FRACTION`, `DEFAULT_FULL_EVERY`, `DEFAULT_REFRESH_EVERY`).

The schedules (L decoder layers, k per step):

| name | trained at step t | gradient | backward through |
|---|---|---|---|
| `cyclic` | block t mod ceil(L/k) of k contiguous layers (the paper's default) | surrogate | the block |
| `random` | k layers drawn uniformly, seeded by (seed, t) (paper) | surrogate | the k layers |
| `importance` | k layers with the largest gradient norm at the last full probe (paper) | surrogate | the k layers |
| `freeze` | like `cyclic` (LISA / BAdam peer, arXiv 2403.17919, 2404.02827) | exact | block to top |
| `top` | the top k layers, every step | exact | top k |
| `topfull` | `top`, and all L layers every `full_every`-th step (the default before `auto`) | exact | top k / all |
| `tail` | every layer above a cut that moves down by k each step, cycling | exact | cut to top |
| `split` | all L: the top k on every example, the rest on `deep_fraction` of them | exact | all / top k |
| `full` | all L layers (plain LoRA) | exact | all |

Usage:
    sched = make_schedule("cyclic", num_layers=30, k=8, seed=42)
    sched.layers_for_step(0)   # frozenset({0, ..., 7})
"""

from lcsb_core.training.schedules.checks import (
    DEFAULT_DEEP_FRACTION,
    DEFAULT_FRACTION,
    DEFAULT_FULL_EVERY,
    DEFAULT_REFRESH_EVERY,
    check_deep_fraction,
    check_full_every,
    check_k_or_fraction,
    deep_rows,
    resolve_k,
)
from lcsb_core.training.schedules.kinds import (
    CyclicSchedule,
    FreezeSchedule,
    FullSchedule,
    ImportanceSchedule,
    PureSchedule,
    RandomSchedule,
    SplitSchedule,
    SwitchSchedule,
    TailSchedule,
    TopFullSchedule,
    TopSchedule,
)
from lcsb_core.training.schedules.protocol import BaseSchedule, Schedule
from lcsb_core.training.schedules.registry import (
    EXACT_GRADIENT_SCHEDULES,
    SCHEDULES,
    check_schedule,
    full_every_for,
    layer_lr_scaling_blocker,
    make_schedule,
    schedule_takes,
)
from lcsb_core.training.schedules.settings import LAYER_LR_SCALINGS, LCSBSettings

__all__ = ["BaseSchedule", "CyclicSchedule", "DEFAULT_DEEP_FRACTION", "DEFAULT_FRACTION", "DEFAULT_FULL_EVERY",
           "DEFAULT_REFRESH_EVERY", "EXACT_GRADIENT_SCHEDULES", "FreezeSchedule", "FullSchedule", "ImportanceSchedule",
           "LAYER_LR_SCALINGS", "LCSBSettings", "PureSchedule", "RandomSchedule", "SCHEDULES", "Schedule",
           "SplitSchedule", "SwitchSchedule", "TailSchedule", "TopFullSchedule", "TopSchedule", "check_deep_fraction",
           "check_full_every", "check_k_or_fraction", "check_schedule", "deep_rows", "full_every_for",
           "layer_lr_scaling_blocker", "make_schedule", "resolve_k", "schedule_takes"]
