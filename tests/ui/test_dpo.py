"""DPO in the dashboard, in Chromium: the create form's method select (supervised / DPO) with its beta
field, the estimate and the create call in OpenAI's `method.dpo` shape on a preference file, the API's
errors next to the field (beta, a chat file for a DPO job); the job page names the method and beta and
plots the reward metrics (TRL's names) of the event stream, train and eval, live."""

from __future__ import annotations

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select

from lcsb_service.events import add_event
from tests.api.helpers import SMOL, job_ok, preference_lines, upload_ok
from tests.ui.conftest import claim


def field_error(ui, param: str) -> str:
    return ui.find(f'.field-error[data-param="{param}"]').text


def test_create_a_dpo_job_through_the_form(ui, alice, client):
    pairs = upload_ok(client, alice, preference_lines(12), filename="pairs.jsonl")
    chat = upload_ok(client, alice, filename="chat.jsonl")
    ui.sign_in(alice, "/ui/jobs/new")
    ui.wait(lambda d: len(ui.find_all("#f-training option")) == 2 and len(ui.find_all("#f-model option")) == 2)
    Select(ui.find("#f-model")).select_by_value(SMOL)
    assert not ui.find("#beta-field").is_displayed()
    Select(ui.find("#f-training")).select_by_value(chat["id"])
    Select(ui.find("#f-method")).select_by_value("dpo")
    assert ui.find("#beta-field").is_displayed() and ui.find("#f-beta").get_attribute("placeholder") == "auto (0.1)"
    ui.wait(lambda d: "a dpo job needs preference pairs" in field_error(ui, "training_file"))
    Select(ui.find("#f-training")).select_by_value(pairs["id"])
    ui.find("#f-beta").send_keys("11")
    ui.wait(lambda d: field_error(ui, "method.dpo.hyperparameters.beta") != "")
    assert field_error(ui, "training_file") == ""
    ui.find("#f-lr").send_keys("5")  # a DPO job's hyperparameter errors land next to the same fields
    ui.find("#f-beta").clear()
    ui.find("#f-beta").send_keys("0.2")
    ui.wait(lambda d: "less than 1" in field_error(ui, "hyperparameters.learning_rate"))
    ui.find("#f-lr").clear()
    ui.find("#f-epochs").send_keys("1")
    ui.wait(lambda d: ui.pairs("#estimate-table tr").get("method") == "dpo (beta 0.2)")
    assert ui.pairs("#estimate-table tr")["epochs"] == "1"
    ui.find("#submit-job").click()
    ui.wait(lambda d: "/ui/jobs/ftjob-" in d.current_url)
    created = client.get("/v1/fine_tuning/jobs", headers=alice.headers).json()["data"]
    assert len(created) == 1 and created[0]["training_file"] == pairs["id"]
    method = created[0]["method"]
    assert method["type"] == "dpo" and method["dpo"]["hyperparameters"]["beta"] == 0.2
    assert method["dpo"]["hyperparameters"]["n_epochs"] == 1
    ui.wait_text("#job-summary", "dpo (beta 0.2)")


def chart(ui, div: str) -> dict | None:
    return ui.js(f"""const p = document.getElementById('{div}').uplot;
        return p ? {{labels: p.series.map(s => s.label), data: p.data}} : null;""")


def test_the_job_page_plots_the_reward_metrics(ui, alice, client, app):
    pairs = upload_ok(client, alice, preference_lines(12))["id"]
    job = job_ok(client, alice, pairs, model=SMOL, method={"type": "dpo"})
    claim(app, job["id"])

    def step(n: int, margin: float, accuracy: float) -> None:
        rewards = {"rewards/chosen": margin / 2, "rewards/rejected": -margin / 2, "rewards/margins": margin,
                   "rewards/accuracies": accuracy}
        with app.state.db.session() as s:
            add_event(s, job["id"], f"Step {n}/6: training loss=0.6", type="metrics",
                      data={"step": n, "total_steps": 6, "train_loss": 0.6, **rewards})

    step(1, 0.1, 0.5)
    ui.sign_in(alice, f"/ui/jobs/{job['id']}")
    ui.wait_text("#job-summary", "dpo (beta 0.1)")
    ui.wait(lambda d: ((chart(ui, "chart-rewards") or {}).get("data") or [[]])[0] == [1])
    assert chart(ui, "chart-rewards")["labels"] == ["step", "train chosen", "train rejected", "train margins"]
    assert chart(ui, "chart-reward-accuracy")["labels"] == ["step", "train accuracies"]
    step(2, 0.3, 0.75)
    with app.state.db.session() as s:
        add_event(s, job["id"], "Step 2/6: validation loss=0.6", type="metrics",
                  data={"step": 2, "valid_loss": 0.6, "eval_rewards/margins": 0.2, "eval_rewards/accuracies": 0.6})
    ui.wait(lambda d: ((chart(ui, "chart-reward-accuracy") or {}).get("data") or [[]])[0] == [1, 2]
            and len(chart(ui, "chart-reward-accuracy")["labels"]) == 3)  # live, from the stream
    accuracy = chart(ui, "chart-reward-accuracy")
    assert accuracy["labels"] == ["step", "train accuracies", "eval accuracies"]
    assert accuracy["data"][0] == [1, 2] and accuracy["data"][1] == pytest.approx([50, 75])
    assert accuracy["data"][2][1] == pytest.approx(60)
    rewards = chart(ui, "chart-rewards")
    assert rewards["labels"][-1] == "eval margins" and rewards["data"][3] == pytest.approx([0.1, 0.3])
    assert ui.find("#rewards-section").is_displayed()
    assert ui.find_all("#events li")[0].find_element(By.CSS_SELECTOR, ".message").text.startswith("Step 2/6")


def test_a_supervised_job_has_no_rewards_section(ui, alice, client, app):
    job = job_ok(client, alice)
    ui.sign_in(alice, f"/ui/jobs/{job['id']}")
    ui.wait_text("#job-summary", "supervised")
    assert not ui.find("#rewards-section").is_displayed()
