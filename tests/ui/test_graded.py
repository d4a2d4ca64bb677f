"""Graded evaluation on a job's page in Chromium: each grader's score against step (step 0 the base
model) drawn from the event stream and growing live, and the final evaluation's sample answers from the
`eval_samples.jsonl` artifact beside the base model's, filtered to the ones that changed, with model
output shown as text (a `<script>` or `<img onerror>` answer runs nothing).

The job is created through /v1 with `method.eval`; what a worker records (the evaluation events as
`worker.training.reporter` writes them, the run folder's `eval_samples.jsonl` as
`lcsb_core.eval.graded` writes it) is written with the service's own functions."""

from __future__ import annotations

import json
import time

import pytest

from lcsb_service import transitions
from lcsb_service.artifacts import publish_run
from lcsb_service.events import add_event
from tests.api.helpers import fake_run, job_ok, upload_ok
from tests.ui.conftest import claim, write_training

GRADERS = [{"type": "numeric"}, {"type": "exact_match", "name": "exact"}]
# each evaluation's mean grades (steps 0 and 6: those of ROWS' base and fine-tuned answers)
SCORES = {0: {"numeric": 3 / 6, "exact": 2 / 6}, 3: {"numeric": 2 / 6, "exact": 1 / 6},
          6: {"numeric": 4 / 6, "exact": 1 / 6}}
XSS = "<script>alert(1)</script><img src=x onerror=alert(2)> #### 18"
QUESTION = ("Janet's ducks lay 16 eggs per day. She eats three for breakfast every morning and bakes muffins for "
            "her friends every day with four. She sells the remainder at the farmers' market daily for $2 per "
            "fresh duck egg. How much in dollars does she make every day at the farmers' market?")
PROMPT = (f"<|im_start|>system\nYou are a helpful AI assistant named SmolLM.<|im_end|>\n<|im_start|>user\n{QUESTION}"
          "<|im_end|>\n<|im_start|>assistant\n")


def sample(line: int, answer: str, base_answer: str, right: dict, base_right: dict, reference: str = "#### 18") -> dict:
    """One row of eval_samples.jsonl at step 6 (lcsb_core.eval.graded's fields)."""
    return {"step": 6, "line": line, "prompt": PROMPT, "reference": reference, "base_answer": base_answer,
            "answer": answer, "grades": {g: float(right[g]) for g in ("numeric", "exact")},
            "base_grades": {g: float(base_right[g]) for g in ("numeric", "exact")}}


NO, YES, NUM = {"numeric": 0, "exact": 0}, {"numeric": 1, "exact": 1}, {"numeric": 1, "exact": 0}
ROWS = [
    sample(1, "She makes 9 dollars.", "She makes 9 dollars.", NO, NO),             # the same wrong answer
    sample(2, "16 - 3 - 4 = 9; 9 * 2 = 18 #### 18", "#### 9", NUM, NO),           # wrong -> right
    sample(3, "#### 20", "#### 18", NO, YES),                                     # right -> wrong
    sample(4, "The answer is 18 dollars.", "The answer is 18.", NUM, NUM),        # another answer, same grades
    sample(5, XSS, "", NUM, NO),                                                  # hostile text, base answered nothing
    sample(6, "#### 18", "#### 18", YES, YES),                                    # the same right answer
]


def write_eval(app, job_id: str, step: int, total: int) -> None:
    """The evaluation event of `step` as the reporter writes it (data: losses and grader/<name>)."""
    scores = {f"grader/{name}": value for name, value in SCORES[step].items()}
    text = "".join(f", {k}={v:.3f}" for k, v in scores.items())
    with app.state.db.session() as s:
        add_event(s, job_id, f"Step {step}/{total}: validation loss=1.5000, token accuracy=0.500{text}",
                  type="metrics", data={"step": step, "valid_loss": 1.5 - 0.1 * step, "valid_mean_token_accuracy": 0.5,
                                        "eval_target_tokens": 120, **scores})


def chart_data(ui) -> dict:
    return ui.js("""const p = document.getElementById('chart-graded').uplot;
        return p ? {labels: p.series.map(s => s.label), data: p.data} : null;""")


def test_graded_scores_per_step_and_the_changed_sample_answers(ui, alice, client, app, tmp_path):
    valid = upload_ok(client, alice, filename="valid.jsonl")["id"]
    job = job_ok(client, alice, validation_file=valid, method={"eval": {"graders": GRADERS, "n_samples": 6}})
    claim(app, job["id"])
    write_training(app, job["id"], range(1, 2), total=6)
    write_eval(app, job["id"], 0, 6)  # the base model's evaluation, reported after step 1
    write_training(app, job["id"], range(2, 4), total=6, start=False)
    write_eval(app, job["id"], 3, 6)
    ui.sign_in(alice, f"/ui/jobs/{job['id']}")
    ui.wait(lambda d: (chart_data(ui) or {}).get("data", [[]])[0] == [0, 3])
    seen = chart_data(ui)
    assert seen["labels"] == ["step", "numeric", "exact"]  # one series per grader, in the job's order
    assert seen["data"][1] == pytest.approx([100 * SCORES[s]["numeric"] for s in (0, 3)])
    assert seen["data"][2] == pytest.approx([100 * SCORES[s]["exact"] for s in (0, 3)])
    assert ui.find("#graded-section").is_displayed() and not ui.find("#samples-section").is_displayed()

    write_training(app, job["id"], range(4, 7), total=6, start=False, end=True)
    write_eval(app, job["id"], 6, 6)
    ui.wait(lambda d: (chart_data(ui) or {}).get("data", [[]])[0] == [0, 3, 6])  # live, from the stream
    seen = chart_data(ui)
    assert seen["data"][1] == pytest.approx([100 * SCORES[s]["numeric"] for s in (0, 3, 6)])
    assert seen["data"][2] == pytest.approx([100 * SCORES[s]["exact"] for s in (0, 3, 6)])
    assert ui.find("#chart-step").get_attribute("data-points") == "6,3"  # eval loss at 0, 3, 6 beside it
    assert ui.painted_pixels("#chart-graded canvas") > 300

    run = fake_run(tmp_path, steps=(6,))
    (run / "eval_samples.jsonl").write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in ROWS))
    with app.state.db.session() as s:
        files = publish_run(s, app.state.storage, job_id=job["id"], owner_id=alice.owner_id, run_dir=run)
        transitions.finish(s, job["id"], fine_tuned_model="ft:graded", trained_tokens=600, result_files=files)
    ui.wait(lambda d: len(ui.find_all("#samples-table tbody tr")) == 6, 20)
    assert ui.find("#samples-section").is_displayed()
    assert ui.text("#samples-heading") == "Sample answers: the base model against step 6"
    rows = ui.rows("#samples-table tbody tr")
    assert [r[0] for r in rows] == ["1", "2", "3", "4", "5", "6"]
    assert [r[2:5] for r in rows] == [[row["reference"], row["base_answer"] or "(empty)", row["answer"]]
                                      for row in ROWS]
    grades = ui.js("return Array.from(document.querySelectorAll('#samples-table tbody tr'), "
                   "tr => Array.from(tr.querySelectorAll('td.grades div'), d => d.textContent))")
    assert grades[1] == ["numeric: ✗ → ✓", "exact: ✗ → ✗"] and grades[2] == ["numeric: ✓ → ✗", "exact: ✓ → ✗"]
    assert grades[5] == ["numeric: ✓ → ✓", "exact: ✓ → ✓"]
    summary = ui.js("return document.querySelector('#samples-table tbody tr td.prompt summary').textContent")
    folded = " ".join(PROMPT.split())
    assert summary == "…" + folded[-160:] and "farmers' market?" in summary  # the question's end, collapsed
    assert not ui.find("#samples-table tbody tr td.prompt details").get_attribute("open")
    assert ui.text("#samples-count") == "4 of 6 answers changed from the base model; showing 6."

    ui.find("#samples-changed").click()  # only the ones that changed: another answer or another grade
    ui.wait(lambda d: ui.find("#samples-section").get_attribute("data-shown") == "4")
    visible = [tr.get_attribute("data-line") for tr in ui.find_all("#samples-table tbody tr") if tr.is_displayed()]
    assert visible == ["2", "3", "4", "5"]
    assert ui.text("#samples-count") == "4 of 6 answers changed from the base model; showing 4."
    ui.find("#samples-changed").click()
    ui.wait(lambda d: ui.find("#samples-section").get_attribute("data-shown") == "6")

    cell = ui.js("return document.querySelector('#samples-table tr[data-line=\"5\"] td:nth-child(5)').textContent")
    assert cell == XSS  # shown as the model wrote it, as text
    time.sleep(0.5)  # an injected onerror would have fired by now
    ui.assert_no_dialog()
    assert ui.js("return document.querySelectorAll('#samples-table script, #samples-table img, [onerror]').length") == 0
    ui.screenshot("job-graded")
    assert ui.console_errors() == []
