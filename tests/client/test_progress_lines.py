"""`lcsb jobs follow` without a terminal: the plain progress lines (every 10 % of the steps or 30 s by
the events' clock, whichever comes first), their ETA from the measured step rate, and none on a
terminal (the bar redraws there)."""

from __future__ import annotations

import io
from datetime import timedelta

from rich.console import Console

from lcsb_client.progress import FollowDisplay, StepRate, progress_line
from tests.client.helpers import step_data

T0 = 1_800_000_000  # Unix seconds of the first step event


def step_event(n: int, total: int, at: float) -> dict:
    return {"type": "metrics", "created_at": at, "message": f"Step {n}/{total}: training loss",
            "data": step_data(n, total)}


def follow(events: list[dict], *, total: int, terminal: bool = False) -> list[str]:
    out = io.StringIO()
    console = Console(file=out, width=200, force_terminal=terminal)
    with FollowDisplay(console, {"progress": {"total_steps": total}}) as display:
        for event in events:
            display.show(event)
    return [line for line in out.getvalue().splitlines() if " step " in line]


def test_a_line_every_30_s_when_10_percent_takes_longer():
    # 1000 steps, so 10 % is 100 steps; seconds after the first step event:
    times = {1: 0, 2: 10, 3: 20, 4: 31, 5: 40, 60: 60, 104: 70, 105: 80, 106: 100}
    lines = follow([step_event(n, 1000, T0 + t) for n, t in times.items()], total=1000)
    # step 1: the first; 4: 31 s after it; 60: 56 steps and 29 s after 4, none; 104: 100 steps after 4;
    # 105: none; 106: 30 s after 104
    assert [line.split()[2] for line in lines] == ["1/1000", "4/1000", "104/1000", "106/1000"]
    assert lines[0].endswith("step 1/1000 (0%)  loss 0.9000  1,234 tok/s  ETA 0:06:40")  # 999 x 0.4 s
    assert lines[1].endswith("ETA 2:51:32")  # 996 steps x 31 s / 3 steps


def test_eta_is_the_remaining_steps_at_the_measured_rate():
    rate = StepRate()
    assert rate.seconds_per_step() is None and rate.eta_s(1, 10) is None
    rate.add(1, T0, 0.4)
    assert rate.seconds_per_step() == 0.4  # one event: the step's own time
    rate.add(4, T0 + 30, 0.4)
    assert rate.seconds_per_step() == 10.0  # 30 s over 3 steps: evaluations in between count
    assert rate.eta_s(4, 1000) == 9960.0 and rate.eta_s(1000, 1000) == 0 and rate.eta_s(4, None) is None
    line = progress_line(step_data(4, 1000), T0 + 30, rate.eta_s(4, 1000))
    assert line.endswith("step 4/1000 (0%)  loss 0.6000  1,234 tok/s  ETA 2:46:00")
    assert str(timedelta(seconds=9960)) == "2:46:00"


def test_the_step_0_evaluation_after_the_first_step_is_left_out_of_the_rate():
    eval_0 = {"type": "metrics", "created_at": T0 + 22, "message": "Step 0/1000: validation loss=1.7612",
              "data": {"step": 0, "valid_loss": 1.7612, "valid_mean_token_accuracy": 0.6}}
    with FollowDisplay(Console(file=io.StringIO(), width=200), {"progress": {"total_steps": 1000}}) as display:
        display.show(step_event(1, 1000, T0))
        display.show(eval_0)  # the trainer runs the step-0 evaluation after the first step
        assert display.rate.seconds_per_step() == 0.4  # the last step's own time until a later step
        display.show(step_event(3, 1000, T0 + 26))
        assert display.rate.seconds_per_step() == 2.0  # (26 - 22) s over 2 steps; 13 s with the evaluation


def test_no_lines_on_a_terminal():
    assert follow([step_event(n, 10, T0 + n) for n in range(1, 11)], total=10, terminal=True) == []


def test_an_evaluation_between_steps_prints_its_progress_events():
    def evaluating(done: int, at: float) -> dict:
        return {"type": "message", "created_at": at, "message": f"Evaluating at step 1: {done}/9 validation batches",
                "data": {"step": 1, "eval_batches_done": done, "eval_batches_total": 9}}

    events = [step_event(1, 10, T0), evaluating(3, T0 + 20), evaluating(6, T0 + 40), step_event(2, 10, T0 + 61)]
    lines = follow(events, total=10)
    assert [line.split(" ", 1)[1] for line in lines[1:3]] == ["Evaluating at step 1: 3/9 validation batches",
                                                               "Evaluating at step 1: 6/9 validation batches"]
    assert len(lines) == 4 and "step 2/10" in lines[3]


def test_the_clock_prints_a_line_when_30_s_pass_without_one():
    now = [float(T0)]
    out = io.StringIO()
    display = FollowDisplay(Console(file=out, width=200), {"progress": {"total_steps": 100}}, clock=lambda: now[0])
    now[0] = T0 + 60
    assert display.seconds_to_next_tick() == 1.0  # no event yet (a queued job): nothing falls due
    now[0] = float(T0)
    with display:
        display.show({"type": "message", "created_at": T0, "message": "Training started: 100 steps"})
        for t in (10, 29.5, 30):  # before any step: one waiting line, 30 s after the last line
            now[0] = T0 + t
            display.tick()
        for n, t in ((1, 40), (2, 50)):  # step 2: 1 step (< 10 %) and 10 s after step 1's line: none
            now[0] = T0 + t
            display.show(step_event(n, 100, T0 + t))
        for t in (69, 70, 85, 100):  # a slow third step: lines 30 s after the last line, at 70 and 100
            now[0] = T0 + t
            display.tick()
        now[0] = T0 + 101
        display.show(step_event(3, 100, T0 + 101))  # 1 s after the clock's line: none
    lines = out.getvalue().splitlines()
    assert lines[0].endswith("Training started: 100 steps") and lines[1].endswith("waiting for the first step")
    now[0] = T0 + 101.25
    assert display.seconds_to_next_tick() == 1.0  # the last line at 100 s: the next is due at 130 s
    now[0] = T0 + 129.5
    assert display.seconds_to_next_tick() == 0.5  # wakes when it is due, not up to a second late
    now[0] = T0 + 140
    assert display.seconds_to_next_tick() == 0.05  # overdue: soon, but the thread never spins
    progress = [line for line in lines if " step " in line and "first" not in line]
    assert len(progress) == 3, lines
    assert progress[0].endswith("step 1/100 (1%)  loss 0.9000  1,234 tok/s  ETA 0:00:40")  # 99 x 0.4 s
    # the clock's lines repeat step 2 at the current time; 98 steps x 10 s, counted down since step 2 (50 s)
    assert "step 2/100 (2%)" in progress[1] and progress[1].endswith("ETA 0:16:00")  # 980 - 20 s
    assert "step 2/100 (2%)" in progress[2] and progress[2].endswith("ETA 0:15:30")  # 980 - 50 s


def test_the_bar_shows_the_highest_step_peak_so_far_not_the_last_steps():
    peaks = {1: 2_940.4, 2: 2_591.0, 3: 2_700.0}  # MiB; the job's own peak is the highest, step 1's
    with FollowDisplay(Console(file=io.StringIO(), width=200), {"progress": {"total_steps": 10}}) as display:
        for n, peak in peaks.items():
            display.show({**step_event(n, 10, T0 + n), "data": {**step_data(n, 10), "peak_memory_mib": peak}})
            shown = display.progress.tasks[0].fields["stats"]
            assert shown.endswith(f"peak {max(list(peaks.values())[:n]):,.0f} MiB")
    assert shown == "loss 0.7000  1,234 tok/s  peak 2,940 MiB"
