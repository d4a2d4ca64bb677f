"""bench/contention.py's own machinery, without timing anything: knob specs and their merging, the per-round
ratios of the summary and the verdict against issue 36's targets."""

from __future__ import annotations

import pytest

from bench import contention
from worker.threads import thread_policy


def test_knob_specs_resolve_and_merge_when_they_mean_the_same():
    knobs = contention.parse_knobs("t=cores;t=cores-1,wait=passive;t=3,wait=PASSIVE;spin=0,t=1;auto,interop=1", 4)
    by_name = {k.name: k for k in knobs}
    assert [k.name for k in knobs] == ["default", "t=cores-1,wait=passive", "spin=0,t=1", "auto,interop=1"]
    assert by_name["default"].names == ("default", "t=cores") and by_name["default"].env() == {}
    assert by_name["t=cores-1,wait=passive"].names == ("t=cores-1,wait=passive", "t=3,wait=PASSIVE")
    assert by_name["t=cores-1,wait=passive"].env() == {"OMP_NUM_THREADS": "3", "OMP_WAIT_POLICY": "PASSIVE"}
    assert by_name["spin=0,t=1"].env() == {"OMP_NUM_THREADS": "1", "GOMP_SPINCOUNT": "0"}
    auto = by_name["auto,interop=1"]  # the worker's own policy on this machine, one slot
    assert (auto.threads, auto.wait, auto.interop) == (thread_policy().threads, "PASSIVE", 1)
    assert contention.parse_knob("auto,slots=2", 4).threads == max(1, int(thread_policy().cpus // 2))
    assert contention.parse_knob("t=cores-1", 1).threads == 1  # never 0
    for bad in ("t=many", "wait=sometimes", "speed=2"):
        with pytest.raises(SystemExit, match="--knobs"):
            contention.parse_knob(bad, 2)


def _record(rnd: int, knob: str, times: dict[str, float]) -> dict:
    return {"round": rnd, "knob": knob,
            "conditions": {c: {"step_s": [t], "mean_s": t, "competitor_per_s": None} for c, t in times.items()}}


def test_the_summary_takes_per_round_ratios_and_judges_the_targets():
    knobs = contention.parse_knobs("t=2,wait=passive", 2)
    knob = "t=2,wait=passive"
    records = [_record(0, "default", {"quiet": 4.0, "busy": 40.0}), _record(0, knob, {"quiet": 4.1, "busy": 8.0}),
               _record(1, "default", {"quiet": 5.0, "busy": 30.0}), _record(1, knob, {"quiet": 5.0, "busy": 10.5}),
               _record(2, "default", {"quiet": 4.0, "busy": 36.0}), _record(2, knob, {"quiet": 4.0, "busy": 9.6})]
    rows = {(r["knob"], r["condition"]): r for r in contention.summarise(records, knobs, ["quiet", "busy"])}
    passive = rows[(knob, "busy")]
    assert passive["rounds"] == [8.0, 10.5, 9.6] and passive["step_s"] == 9.6
    assert passive["vs_own_quiet"] == pytest.approx(2.1)        # 1.95, 2.1, 2.4 per round
    assert passive["vs_default_quiet"] == pytest.approx(2.1)    # 2.0, 2.1, 2.4
    assert rows[(knob, "quiet")]["vs_default_quiet"] == pytest.approx(1.0)  # 1.025, 1.0, 1.0
    assert rows[("default", "busy")]["vs_own_quiet"] == pytest.approx(9.0)  # 10, 6, 9
    verdict = contention.tables(list(rows.values()), ["quiet", "busy"]).splitlines()[-2:]
    assert verdict == ["| default | 1.000x | 9.00x | no |", "| t=2,wait=passive | 1.000x | 2.10x | yes |"]
