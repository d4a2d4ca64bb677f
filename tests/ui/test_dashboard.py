"""The dashboard in a real browser (headless Chromium via Selenium) against uvicorn: sign-in and
sign-out, files with their validation report, the create-job form (estimate, field errors), a job
page filled from the job's event stream (charts, heatmap, events, memory, downloads, cancel), compare,
owner isolation, and hostile names rendered as text.

Jobs are created through the real /v1 routes (the form or the API); what a worker would record while
training is written with the service's own functions (`lcsb_service.events`, `transitions`,
`artifacts`) and read back by the pages through /v1 only."""

from __future__ import annotations

import json
import tarfile
import time

from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select

from lcsb_core.training.schedules import SCHEDULES, LCSBSettings
from lcsb_service import transitions
from lcsb_service.artifacts import publish_checkpoint, publish_run
from lcsb_service.events import add_event
from tests.api.helpers import chat_lines, fake_run, job_ok, publish_outputs, upload_ok
from tests.ui.conftest import LAYERS, claim, cyclic_layers, wait_for, write_training

HOSTILE_NAME = "<img src=x onerror=alert(1)>.jsonl"
HOSTILE_EVENT = "<script>alert(2)</script><img src=x onerror=alert(3)> & <b>bold</b>"


def test_sign_in_keeps_the_key_out_of_urls_and_sign_out_clears_it(ui, alice):
    ui.get("/ui/sign-in")
    ui.js("sessionStorage.clear()")  # signed out, whichever test ran before in this tab
    ui.get("/ui/jobs")
    ui.wait(lambda d: "/ui/sign-in?next=%2Fui%2Fjobs" in d.current_url)
    ui.find("#api-key").send_keys("sk-lcsb-not-a-real-key")
    ui.find("#sign-in-form button").click()
    assert ui.wait_text("#sign-in-error", "not accepted")
    assert ui.js("return sessionStorage.getItem('lcsb_api_key')") is None
    ui.find("#api-key").clear()
    ui.find("#api-key").send_keys(alice.key)
    ui.find("#sign-in-form button").click()
    ui.wait(lambda d: d.current_url.endswith("/ui/jobs"))
    assert ui.js("return sessionStorage.getItem('lcsb_api_key')") == alice.key
    assert alice.key not in ui.driver.current_url
    assert ui.driver.get_cookies() == []  # the key lives in this tab's session storage only
    history = ui.js("return performance.getEntriesByType('resource').map(e => e.name)"
                    ".concat(performance.getEntriesByType('navigation').map(e => e.name))")
    assert history and not any(alice.key in name for name in history)
    assert ui.find("#jobs-empty").is_displayed()
    ui.find("#sign-out").click()
    ui.wait(lambda d: d.current_url.endswith("/ui/sign-in"))
    assert ui.js("return sessionStorage.getItem('lcsb_api_key')") is None
    ui.get("/ui/files")
    ui.wait(lambda d: "/ui/sign-in?next=%2Fui%2Ffiles" in d.current_url)
    errors = ui.console_errors()  # only the rejected key's check (Chromium logs every 401 response)
    assert len(errors) == 1 and "/v1/files?limit=1" in errors[0] and "401" in errors[0], errors


def upload_in_page(ui, path) -> None:
    ui.find("#upload-file").send_keys(str(path))
    ui.find("#upload-form button").click()
    ui.wait(lambda d: ui.text("#upload-status").startswith(("Uploaded", "Upload failed")))


def test_upload_shows_progress_and_the_validation_report_with_line_numbers(ui, alice, tmp_path):
    good, bad = tmp_path / "train.jsonl", tmp_path / "broken.jsonl"
    good.write_bytes(chat_lines(12))
    bad.write_bytes(chat_lines(2) + b'{"bad json\n' + b'{"messages": [{"role": "robot", "content": "x"}]}\n')
    ui.sign_in(alice, "/ui/files")
    upload_in_page(ui, good)
    assert ui.text("#upload-status").startswith("Uploaded file-")
    assert ui.find("#upload-progress").get_attribute("value") == "100"
    assert ui.text("#report-status") == "Valid: ready for training."
    counts = ui.pairs("#report-counts tr")
    assert counts["valid examples"] == "12" and counts["invalid examples"] == "0" and counts["format"] == "chat"
    upload_in_page(ui, bad)
    assert ui.text("#upload-status").startswith("Uploaded, but rejected: file-")
    assert ui.text("#report-status").startswith("Rejected:")
    rows = ui.rows("#report-errors tbody tr")
    assert rows[0][0] == "3" and rows[0][2].startswith("not valid JSON")
    assert rows[1][:2] == ["4", "messages[0].role"] and "unknown role 'robot'" in rows[1][2]
    assert ui.find_all(".file-error") == []   # line errors only: the count a job needs is checked at job creation
    ui.wait(lambda d: len(ui.find_all("#files-table tbody tr")) == 2)
    table = ui.rows("#files-table tbody tr")
    assert [(r[0], r[3], r[4], r[5]) for r in table] == [("broken.jsonl", "2", "chat", "error"),
                                                         ("train.jsonl", "12", "chat", "processed")]
    ui.find("#files-table tbody tr:last-child a.file-name").click()  # an earlier file's report
    ui.wait_text("#report-name", "train.jsonl")
    assert ui.text("#report-status") == "Valid: ready for training."
    ui.screenshot("files")
    ui.assert_no_dialog()


def test_hostile_file_name_and_event_markup_render_as_text(ui, alice, client, app):
    hostile = upload_ok(client, alice, filename=HOSTILE_NAME)
    job = job_ok(client, alice, hostile["id"])
    with app.state.db.session() as s:
        add_event(s, job["id"], HOSTILE_EVENT, level="warn")
    ui.sign_in(alice, "/ui/files")
    ui.wait(lambda d: ui.find_all("#files-table tbody a.file-name"))
    assert ui.text("#files-table tbody a.file-name") == HOSTILE_NAME
    assert ui.find_all("#files-table img") == []
    ui.find("#files-table tbody a.file-name").click()
    ui.wait_text("#report-name", HOSTILE_NAME)
    ui.get("/ui/jobs/new")
    ui.wait(lambda d: ui.find_all("#f-training option"))
    assert Select(ui.find("#f-training")).first_selected_option.text == f"{HOSTILE_NAME} ({hostile['id']})"
    ui.get(f"/ui/jobs/{job['id']}")
    ui.wait_text("#events", "onerror")
    assert HOSTILE_EVENT in [e.text for e in ui.find_all("#events .message")]
    assert ui.find_all("main img") == [] and ui.find_all("main b") == [] and ui.find_all("main script") == []
    time.sleep(0.5)  # an injected onerror would have fired by now
    ui.assert_no_dialog()
    assert ui.js("return document.querySelectorAll('[onerror]').length") == 0


def all_events(client, tenant, job_id: str) -> list[dict]:
    out, after = [], None
    while True:
        page = client.get(f"/v1/fine_tuning/jobs/{job_id}/events", headers=tenant.headers,
                          params={"limit": 100, **({"after": after} if after else {})}).json()
        out += page["data"]
        if not page["has_more"]:
            return out
        after = page["data"][-1]["id"]


def test_job_page_follows_the_event_stream_and_downloads_the_adapter(ui, alice, client, app, tmp_path, download_dir):
    job = job_ok(client, alice, method={"lcsb": {"schedule": "cyclic", "k": 8}})
    claim(app, job["id"])
    write_training(app, job["id"], range(1, 7), total=12, eval_every=3, step_s=1.0)
    ui.sign_in(alice, f"/ui/jobs/{job['id']}")
    heatmap = ui.find("#heatmap")
    ui.wait(lambda d: heatmap.get_attribute("data-steps") == "6")
    assert ui.text("#job-status") == "running"
    ui.wait_text("#job-progress-text", "ETA")
    assert ui.text("#job-progress-text").startswith("6/12 steps (50%) · ETA ")
    time.sleep(2.5)  # past the server's stream limit (2 s): the page must reconnect with Last-Event-ID
    write_training(app, job["id"], range(7, 13), total=12, eval_every=3, start=False, end=True, step_s=1.0)
    run = fake_run(tmp_path, steps=(6, 12))
    history = [{"step": i, "selected": cyclic_layers(i + 1), "update_norm": [0.0] * LAYERS,
                "grad_norm": [(1.0 if i == 3 else 0.25) if layer in cyclic_layers(i + 1) else None
                              for layer in range(LAYERS)]} for i in range(12)]
    (run / "selection_history.jsonl").write_text("".join(json.dumps(row) + "\n" for row in history))
    (run / "config.json").write_text(json.dumps({"lora": {"rank": 16}, "output_dir": str(run)}))
    with app.state.db.session() as s:
        publish_checkpoint(s, app.state.storage, job_id=job["id"], step=6, fine_tuned_model="ft:ui-test:ckpt-6",
                           folder=run / "checkpoints" / "step-000006", metrics={"step": 6})
    with app.state.db.session() as s:
        files = publish_run(s, app.state.storage, job_id=job["id"], owner_id=alice.owner_id, run_dir=run)
        transitions.finish(s, job["id"], fine_tuned_model="ft:ui-test", trained_tokens=1200, result_files=files)
    ui.wait(lambda d: d.find_element(By.TAG_NAME, "body").get_attribute("data-stream-done") == "true", 20)
    ui.wait(lambda d: heatmap.get_attribute("data-steps") == "12")
    assert heatmap.get_attribute("data-filled") == str(sum(len(cyclic_layers(s)) for s in range(1, 13)))
    assert ui.text("#heatmap-caption").startswith(f"12 steps, {LAYERS} layers.")
    ui.wait(lambda d: ui.find("#chart-step").get_attribute("data-points") == "12,4")
    assert ui.find("#chart-time").get_attribute("data-points") == "12,4"
    assert ui.painted_pixels("#heatmap") > 1000 and ui.painted_pixels("#chart-step canvas") > 500
    ui.wait(lambda d: heatmap.get_attribute("data-shaded") == "12")  # from selection_history.jsonl
    assert "Shaded by each trained layer's LoRA gradient norm" in ui.text("#heatmap-caption")
    cells = ui.js("""const c = document.getElementById('heatmap'), ctx = c.getContext('2d');
        const probe = (x, y) => Array.from(ctx.getImageData(x, y, 1, 1).data.slice(0, 3));
        // step 1 trains layers 0-7 (bottom rows, norm 0.25), step 4 layers 24-29 (top rows, norm 1.0, the max)
        const cw = (c.width - 34) / 12, ch = (c.height - 18) / 30;
        return [probe(34 + cw / 2, 29.5 * ch), probe(34 + cw / 2, 0.5 * ch), probe(34 + 3.5 * cw, 0.5 * ch)];""")
    assert cells[2] == [59, 111, 212]  # the largest gradient norm: full colour
    assert cells[1] == [244, 244, 246]  # layer 29 did not train at step 1: background
    assert 59 < cells[0][0] < 244 and cells[0][2] > 212 - 5  # a quarter of the largest: a lighter blue
    assert '"rank": 16' in ui.text("#config") and str(tmp_path) not in ui.text("#config")  # no worker path
    events = [e.text for e in ui.find_all("#events .message")]
    api_events = [e["message"] for e in all_events(client, alice, job["id"])]
    assert events == api_events  # newest first, each once across the reconnects
    ui.wait_text("#job-status", "succeeded")
    assert ui.text("#job-progress-text").startswith("12/12 steps (100%) · finished ")
    memory = ui.pairs("#memory-table tr")
    assert memory["measured peak (MiB)"] == "912.0"
    assert float(memory["estimated peak (MiB)"]) == round(job["memory_estimate"]["total_mib"], 1)
    assert '"n_epochs"' in ui.text("#hyperparameters") and '"layers_per_step": 8' in ui.text("#method")
    ui.wait(lambda d: len(ui.find_all("#artifacts a.download")) >= 4)
    names = ui.js("return Array.from(document.querySelectorAll('#artifacts a.download'), a => a.textContent)")
    assert {"adapter.tar.gz", "selection_history.jsonl", "metrics.csv", "plots/loss.png"} <= set(names)
    # no graders in this job: no score chart and no sample table, not even empty boxes (tests/ui/test_graded.py)
    assert not ui.find("#graded-section").is_displayed() and ui.find_all("#chart-graded *") == []
    assert not ui.find("#samples-section").is_displayed() and ui.find_all("#samples-table tbody tr") == []
    assert not ui.find("#cancel-button").is_displayed()
    assert ui.js("return Array.from(document.querySelectorAll('#checkpoints a.download'), a => a.textContent)") \
        == ["step 6 adapter"]
    ui.screenshot("job")
    ui.js("Array.from(document.querySelectorAll('#artifacts a.download'))"
          ".find(a => a.textContent === 'adapter.tar.gz').click()")
    target = download_dir / f"{job['id']}-adapter.tar.gz"
    wait_for(lambda: target.exists() and target.stat().st_size > 0)
    with tarfile.open(target, "r:gz") as tar:
        assert "adapter/adapter_model.safetensors" in tar.getnames()
    ui.assert_no_dialog()
    assert ui.console_errors() == []


def test_cancel_asks_first_then_cancels(ui, alice, client, app):
    job = job_ok(client, alice)
    claim(app, job["id"])
    write_training(app, job["id"], range(1, 3), total=40)
    ui.sign_in(alice, f"/ui/jobs/{job['id']}")
    ui.wait_text("#job-status", "running")
    ui.find("#cancel-button").click()
    assert ui.find("#cancel-dialog").is_displayed()
    ui.find("#cancel-no").click()
    time.sleep(0.3)
    assert client.get(f"/v1/fine_tuning/jobs/{job['id']}", headers=alice.headers).json()["status"] == "running"
    ui.find("#cancel-button").click()
    ui.find("#cancel-yes").click()
    ui.wait_text("#job-status", "cancelled")
    assert client.get(f"/v1/fine_tuning/jobs/{job['id']}", headers=alice.headers).json()["status"] == "cancelled"
    assert not ui.find("#cancel-button").is_displayed()
    ui.assert_no_dialog()


def test_compare_draws_each_jobs_eval_loss_against_step_and_time(ui, alice, client, app):
    jobs = []
    for schedule, loss0, steps, step_s in (("cyclic", 2.5, 12, 2.0), ("full", 2.0, 8, 5.0)):
        job = job_ok(client, alice, method={"lcsb": {"schedule": schedule}})
        claim(app, job["id"])
        write_training(app, job["id"], range(1, steps + 1), total=steps, eval_every=4, loss0=loss0, end=True,
                       step_s=step_s)
        with app.state.db.session() as s:
            transitions.finish(s, job["id"], fine_tuned_model=f"ft:{schedule}", trained_tokens=10)
        jobs.append(job)
    ui.sign_in(alice, "/ui/compare")
    ui.wait(lambda d: len(ui.find_all("#compare-picker input")) == 2)
    ui.find("#compare-picker input").click()
    ui.find("#compare-form button").click()
    assert ui.wait_text("#compare-error", "at least two")
    for box in ui.find_all("#compare-picker input:not(:checked)"):
        box.click()
    ui.find("#compare-form button").click()
    ui.wait(lambda d: d.find_element(By.TAG_NAME, "body").get_attribute("data-compared") == "2")
    ids = [job["id"] for job in jobs][::-1]  # the picker lists newest first
    assert ui.driver.current_url.endswith("/ui/compare?jobs=" + ",".join(ids))
    rows = {tr.get_attribute("data-job-id"): [td.text for td in tr.find_elements(By.TAG_NAME, "td")]
            for tr in ui.find_all("#compare-table tbody tr")}
    assert rows[jobs[0]["id"]][1:5] == ["cyclic", "8", "succeeded", "3"]  # evals at steps 4, 8, 12
    assert rows[jobs[1]["id"]][1:5] == ["full", "30", "succeeded", "2"]
    assert rows[jobs[0]["id"]][5] == f"{2.5 / (1 + 0.2 * 12) + 0.3:.4f}"
    assert [rows[job["id"]][6] for job in jobs] == ["24s", "40s"]  # train_seconds of "Training finished"
    assert ui.find("#compare-step").get_attribute("data-points") == "2,3"
    assert ui.find("#compare-time").get_attribute("data-points") == "2,3"
    legend = [e.text for e in ui.find_all("#compare-step .u-legend .u-label")]
    assert legend[1:] == [f"{ids[0]} (full, k=30)", f"{ids[1]} (cyclic, k=8)"]
    assert ui.painted_pixels("#compare-step canvas") > 300 and ui.painted_pixels("#compare-time canvas") > 300
    ui.screenshot("compare")
    ui.get("/ui/compare?jobs=" + ",".join(ids))  # the URL alone is enough
    ui.wait(lambda d: d.find_element(By.TAG_NAME, "body").get_attribute("data-compared") == "2")
    ui.assert_no_dialog()
    assert ui.console_errors() == []


def field_error(ui, param: str) -> str:
    return ui.find(f'.field-error[data-param="{param}"]').text


def test_create_form_shows_the_estimate_and_the_apis_field_errors(ui, alice, client):
    upload_ok(client, alice, filename="train.jsonl")
    ui.sign_in(alice, "/ui/jobs/new")
    ui.wait(lambda d: len(ui.find_all("#f-model option")) == 2)
    Select(ui.find("#f-model")).select_by_value("Giant-70B")  # no worker class holds it: 422, no field
    ui.wait_text("#form-error", "no worker class can hold it")
    assert ui.text("#estimate-text") == "No estimate until the errors are fixed."
    Select(ui.find("#f-model")).select_by_value("SmolLM2-135M-Instruct")
    ui.wait(lambda d: d.find_element(By.TAG_NAME, "body").get_attribute("data-estimated") == "cpu-6g")
    assert ui.text("#form-error") == ""
    schedule = Select(ui.find("#f-schedule"))
    # the core's list after "auto" (the model's default by the rule), which is preselected
    assert [o.text for o in schedule.options] == ["auto", *SCHEDULES]
    assert schedule.first_selected_option.text == LCSBSettings().schedule == "auto"
    estimate = client.post("/v1/fine_tuning/jobs/estimate", headers=alice.headers, json={
        "model": "SmolLM2-135M-Instruct", "training_file": Select(ui.find("#f-training")).first_selected_option
        .get_attribute("value"), "hyperparameters": {},
        "method": {"lora": {"rank": 16}, "lcsb": {"schedule": LCSBSettings().schedule}}})
    total = estimate.json()["memory_estimate"]["total_mib"]
    assert ui.text("#estimate-text").startswith(f"Estimated peak {total:.0f} MiB")
    assert "worker class cpu-6g (cap 6144 MiB" in ui.text("#estimate-text")
    # the table names the schedule "auto" chose for this job, as the API resolves it
    assert ui.pairs("#estimate-table tr")["schedule"] == estimate.json()["method"]["lcsb"]["schedule"]
    schedule.select_by_visible_text("topfull")  # k, below, is a selective schedule's setting
    ui.find("#f-k").send_keys("99")
    ui.wait(lambda d: field_error(ui, "method.lcsb.k") != "")
    assert "method.lcsb.k" in field_error(ui, "method.lcsb.k") and "30" in field_error(ui, "method.lcsb.k")
    assert ui.text("#estimate-text") == "No estimate until the errors are fixed."
    ui.find("#f-k").clear()
    ui.find("#f-k").send_keys("4")
    ui.find("#f-lr").send_keys("5")
    ui.wait(lambda d: field_error(ui, "hyperparameters.learning_rate") != "")
    assert field_error(ui, "method.lcsb.k") == ""
    assert "less than 1" in field_error(ui, "hyperparameters.learning_rate")
    ui.find("#submit-job").click()  # the create call answers the same error, next to the same field
    time.sleep(0.3)
    assert "less than 1" in field_error(ui, "hyperparameters.learning_rate")
    assert client.get("/v1/fine_tuning/jobs", headers=alice.headers).json()["data"] == []
    ui.find("#f-lr").clear()
    ui.find("#f-lr").send_keys("0.0002")
    ui.find("#f-steps").send_keys("6")
    ui.wait(lambda d: ui.text("#estimate-text").startswith("Estimated peak"))
    assert ui.pairs("#estimate-table tr")["layers per step"] == "4"
    assert ui.pairs("#estimate-table tr")["schedule"] == "topfull"  # named in the form
    ui.screenshot("new-job")
    ui.find("#submit-job").click()
    ui.wait(lambda d: "/ui/jobs/ftjob-" in d.current_url)
    created = client.get("/v1/fine_tuning/jobs", headers=alice.headers).json()["data"]
    assert len(created) == 1 and ui.driver.current_url.endswith("/ui/jobs/" + created[0]["id"])
    assert created[0]["method"]["lcsb"]["layers_per_step"] == 4 and created[0]["hyperparameters"]["max_steps"] == 6
    assert created[0]["hyperparameters"]["learning_rate"] == 0.0002
    ui.wait_text("#job-status", "queued")
    ui.assert_no_dialog()


def test_another_owner_sees_none_of_the_first_owners_objects(ui, alice, bob, client, app):
    file = upload_ok(client, alice, filename="alice-secret.jsonl")
    job = job_ok(client, alice, file["id"])
    ui.sign_in(bob, "/ui/jobs")
    ui.wait(lambda d: ui.find("#jobs-empty").is_displayed())
    assert ui.find_all("#jobs-table tbody tr") == []
    ui.get("/ui/files")
    ui.wait(lambda d: ui.find("#files-empty").is_displayed())
    assert "alice-secret" not in ui.find("main").text
    pages = []
    for job_id in (job["id"], "ftjob-doesnotexist0000000000"):
        ui.get(f"/ui/jobs/{job_id}")
        ui.wait(lambda d: ui.find("#not-found").is_displayed())
        assert not ui.find("#job").is_displayed()
        pages.append(ui.find("main").text)
    assert pages[0] == pages[1] and "No such fine-tuning job." in pages[0]
    ui.get(f"/ui/compare?jobs={job['id']},{job['id']}")
    assert ui.wait_text("#compare-error", "No such fine-tuning job: " + job["id"])
    ui.get("/ui/jobs/new")
    ui.wait(lambda d: ui.find_all("#f-model option"))
    assert ui.find_all("#f-training option") == []
    ui.sign_in(alice, "/ui/jobs")  # and the owner sees both
    ui.wait(lambda d: len(ui.find_all("#jobs-table tbody tr")) == 1)
    row = ui.find("#jobs-table tbody tr")
    assert row.get_attribute("data-job-id") == job["id"] and row.get_attribute("data-status") == "queued"
    Select(ui.find("#status-filter")).select_by_visible_text("running")
    ui.wait(lambda d: ui.find("#jobs-empty").is_displayed())
    assert ui.driver.current_url.endswith("/ui/jobs?status=running")
    claim(app, job["id"])
    ui.wait(lambda d: len(ui.find_all("#jobs-table tbody tr")) == 1, timeout=10)  # the list updates itself
    assert ui.find("#jobs-table tbody tr").get_attribute("data-status") == "running"


def test_a_continued_jobs_page_names_its_parent(ui, alice, client, app, tmp_path):
    parent = job_ok(client, alice, suffix="p", hyperparameters={"n_epochs": 1})
    name = publish_outputs(app, parent, alice.name, fake_run(tmp_path), finish=True)
    child = job_ok(client, alice, parent["training_file"], model=name, hyperparameters={"n_epochs": 1})
    ui.sign_in(alice, f"/ui/jobs/{child['id']}")
    ui.wait_text("#job-lineage", "Continued from")
    assert ui.text("#job-lineage") == f"Continued from {name} (job {parent['id']}) · base {parent['model']}"
    link = ui.find("#job-lineage a")
    assert link.get_attribute("href").endswith(f"/ui/jobs/{parent['id']}")
    ui.get(f"/ui/jobs/{parent['id']}")
    ui.wait_text("#job-summary", name)
    assert not ui.find("#job-lineage").is_displayed()  # a job trained from the base names no parent
