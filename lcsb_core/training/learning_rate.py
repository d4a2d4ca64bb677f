"""The learning rate and warmup a run gets when it names none: a stated rule from measurement (issue 30).

The rule: **the peak learning rate is the best one the learning-rate grid measured for the run's
schedule** (`MEASURED_BEST`), with **`auto_warmup_steps` of linear warmup**. A job's
`learning_rate_multiplier` multiplies this value ("auto" = 1), so the core and the service resolve the
same number (`default_learning_rate`).

Where the values come from (BENCHMARKS.md, "Learning rate per schedule" and "The default on three
kinds of data"): SmolLM2-135M-Instruct NF4, LoRA r16/alpha 32 on all seven projections, batch 4,
5 warm-up steps then a constant rate, 32-72 steps, GSM8K; grid points 2e-4, 4e-4, 8e-4 and 1.6e-3.
Every exact-gradient schedule and full backprop were best at 8e-4; `top` at the grid's edge, 1.6e-3;
the paper's `cyclic` at 4e-4. A job at the old default of 1e-4 reached about a fifth of full
backprop's gain at 8e-4 (issue 30's table), which is why the default moved.

What the rule does not vary by, and why: the batch size and the run length were not part of the
grid (batch 4, 32-100 steps measured), so the rule does not scale with them; Gemma-3-270M was trained
at 8e-4 only (its full backprop gained 46 % of its base eval loss in 20 steps there), so it gets
SmolLM2's values. `random` and `importance` (surrogate gradients, like `cyclic`) were not gridded and
take `cyclic`'s value. On Code Alpaca (chat, answer-only loss; seed 0, 32 steps; grid points 4e-4, 8e-4,
1.6e-3) full backprop, `topfull` and `split` were each best at 8e-4 too (BENCHMARKS.md, "Learning rates and
schedule shapes on Code Alpaca"), so the rule does not vary by kind of data either.
"""

from __future__ import annotations

from lcsb_core.errors import ConfigError

MEASURED_BEST: dict[str, float] = {
    "full": 8e-4, "topfull": 8e-4, "tail": 8e-4, "freeze": 8e-4, "split": 8e-4,
    "top": 1.6e-3,
    "cyclic": 4e-4, "random": 4e-4, "importance": 4e-4,
    "auto": 8e-4,
}
"""Schedule name -> its peak learning rate when the run names none (see the module docstring). `auto`'s
probe-then-switch schedule (`lcsb_core.training.schedules.SwitchSchedule`) runs full backprop, then `tail` or full
backprop again: both measured best at 8e-4."""

DPO_LEARNING_RATE: float = 2e-4
"""The peak learning rate of a DPO run (`TrainConfig.dpo`) that names none, whatever its schedule: the rate
the DPO learning-rate checks chose by their stated rules (bench/grids/dpo_hh.yaml; BENCHMARKS.md, "DPO").
First 16 steps of full backprop on hh-rlhf-harmless pairs at 5e-5, 2e-4 and 8e-4, the lowest mean training
DPO loss over steps 9-16: 5e-5 (0.699; 0.719 at 2e-4, 0.848 at 8e-4). Then whole 30-minute jobs (`lr120`:
120 steps of the default schedule, seed 0, 2 threads), the lower mean training DPO loss over steps 81-120,
each batch new to the model when it is scored: 2e-4 (0.6533 against 0.6666 at 5e-5). The validation pairs
stayed out of both choices; on them the two 120-step jobs reach 60.5 % (2e-4) and 61.5 % (5e-5) preference
accuracy and DPO loss 0.6803 and 0.6657: they rank the rates the other way. One seed; the schedules take the
same rate."""

AUTO_WARMUP_MAX = 5
"""Warmup steps of the grid behind `MEASURED_BEST`; `auto_warmup_steps` never exceeds it."""


def default_learning_rate(schedule: str, *, dpo: bool = False) -> float:
    """The peak learning rate (AdamW's lr, per optimizer step) a run of `schedule` gets when it names
    none, from `MEASURED_BEST`; a DPO run (`dpo`) gets `DPO_LEARNING_RATE`.

    Raises:
        ConfigError: `schedule` is not a known schedule name, naming `lcsb.schedule`.
    """
    try:
        best = MEASURED_BEST[schedule]
        return DPO_LEARNING_RATE if dpo else best
    except KeyError:
        raise ConfigError("lcsb.schedule", f"has no default learning rate: unknown schedule {schedule!r}") from None


def auto_warmup_steps(total_steps: int) -> int:
    """Linear-warmup steps for a run of `total_steps` optimizer steps when it names none:
    min(`AUTO_WARMUP_MAX`, max(1, total_steps // 4)), so a run of 20 steps or more warms up as the grid
    did (5 steps) and a shorter one for a quarter of its steps (at least 1)."""
    return min(AUTO_WARMUP_MAX, max(1, total_steps // 4))
