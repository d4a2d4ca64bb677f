"""The job page's GGUF export form in Chromium: on a succeeded job, the chosen formats and checkpoint go
to `POST .../exports` (read back through the API), the export's status follows the worker's transitions
(queued -> running -> succeeded, written with `lcsb_service.exports` as a worker would, with staged files
in storage instead of running llama.cpp's converters), and its files become download links to the API's
file URLs that download the stored bytes. A refusal (no format chosen; LoRA on lm_head of a tied base)
shows the API's message in the page, with no stack trace or internal path."""

from __future__ import annotations

import hashlib

from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select
from sqlalchemy import update

from lcsb_service.exports import claim_export, finish_export
from lcsb_service.models import Job
from tests.api.test_exports import succeeded_job, url
from tests.ui.conftest import wait_for


def export_items(ui) -> list[dict]:
    """{id, status, text, links: [[text, href]]} of each listed export, read in one go."""
    return ui.js("""return Array.from(document.querySelectorAll('#exports li[data-export-id]'), li => ({
        id: li.dataset.exportId, status: li.dataset.status, text: li.textContent,
        links: Array.from(li.querySelectorAll('a.download'), a => [a.textContent, a.getAttribute('href')])}))""")


def stage_files(app, tmp_path, job_id: str, export_id: str) -> list[dict]:
    """What the worker stores for adapter, merged-f16 and merged-q4_1: files under jobs/<job>/exports/<export>/."""
    files = []
    for name, fmt, body in (("adapter.gguf", "adapter", b"GGUF adapter bytes"),
                            ("merged-f16.gguf", "merged-f16", b"GGUF merged f16 bytes"),
                            ("merged-q4_1.gguf", "merged-q4_1", b"GGUF merged q4_1 bytes"),
                            ("Modelfile", None, b"FROM ./merged-f16.gguf\n"),
                            ("manifest.json", None, b'{"formats": ["adapter", "merged-f16", "merged-q4_1"]}')):
        local = tmp_path / name
        local.write_bytes(body)
        key = f"jobs/{job_id}/exports/{export_id}/{name}"
        size = app.state.storage.put_file(local, key)
        files.append({"name": name, "format": fmt, "bytes": size, "sha256": hashlib.sha256(body).hexdigest(),
                      "effect_kept": {"merged-f16": 0.99, "merged-q4_1": 0.05}.get(fmt or ""), "storage_key": key})
    return files


def test_export_form_sends_the_choice_follows_the_status_and_links_the_files(ui, alice, client, app, tmp_path,
                                                                            download_dir):
    job = succeeded_job(client, alice, app, tmp_path)  # a checkpoint at step 2
    ui.sign_in(alice, f"/ui/jobs/{job['id']}")
    ui.wait(lambda d: ui.find("#export-form").is_displayed())
    ui.wait(lambda d: ui.js("return Array.from(document.querySelectorAll('#export-checkpoint option'), "
                            "o => o.value)") == ["", "2"])
    # the page reloads its downloads (and the checkpoint choice) when the event stream ends
    ui.wait(lambda d: d.find_element(By.TAG_NAME, "body").get_attribute("data-stream-done") == "true", 20)
    checked = ui.js("return Array.from(document.querySelectorAll('#export-form input[name=format]:checked'), "
                    "c => c.value)")
    assert checked == ["adapter", "merged-f16", "merged-q8_0"]  # the API's defaults
    ui.find("#export-form input[value='merged-q8_0']").click()  # off
    ui.find("#export-form input[value='merged-q4_1']").click()  # on
    Select(ui.find("#export-checkpoint")).select_by_value("2")
    ui.find("#export-button").click()
    ui.wait(lambda d: len(export_items(ui)) == 1)
    listed = client.get(url(job["id"]), headers=alice.headers).json()["data"]
    assert len(listed) == 1
    export = listed[0]
    assert export["formats"] == ["adapter", "merged-f16", "merged-q4_1"] and export["checkpoint_step"] == 2
    assert export["status"] == "queued"
    item = export_items(ui)[0]
    assert item["id"] == export["id"] and item["status"] == "queued"
    assert item["text"] == "adapter, merged-f16, merged-q4_1 (step 2): queued" and item["links"] == []
    assert not ui.find("#export-error").is_displayed()

    with app.state.db.session() as s:
        assert claim_export(s, export["id"]) is not None
    ui.wait(lambda d: export_items(ui)[0]["status"] == "running")
    files = stage_files(app, tmp_path, job["id"], export["id"])
    with app.state.db.session() as s:
        finish_export(s, export["id"], files=files, manifest={"formats": ["adapter", "merged-f16", "merged-q4_1"]})
    ui.wait(lambda d: export_items(ui)[0]["status"] == "succeeded")
    item = export_items(ui)[0]
    base = f"/v1/fine_tuning/jobs/{job['id']}/exports/{export['id']}/files/"
    assert item["links"] == [[f["name"], base + f["name"]] for f in files]
    assert "merged-f16.gguf 21 B, effect kept 99.0 %" in item["text"]
    assert "merged-q4_1.gguf 22 B, effect kept 5.0 %" in item["text"]
    ui.screenshot("job-exports")
    ui.js("Array.from(document.querySelectorAll('#exports a.download'))"
          ".find(a => a.textContent === 'adapter.gguf').click()")
    target = download_dir / "adapter.gguf"
    wait_for(lambda: target.exists() and target.stat().st_size == len(b"GGUF adapter bytes"))
    assert target.read_bytes() == b"GGUF adapter bytes"

    # refusals: the API's message in the page, nothing exported
    for box in ui.find_all("#export-form input[name=format]:checked"):
        box.click()
    ui.find("#export-button").click()
    ui.wait(lambda d: ui.find("#export-error").is_displayed())
    assert ui.text("#export-error").startswith("Export refused: must name at least one format of adapter")
    with app.state.db.session() as s:  # a job trained with LoRA on lm_head: SmolLM2 ties it to the embeddings
        s.execute(update(Job).where(Job.id == job["id"]).values(
            train_config={"lora": {"rank": 8, "alpha": 16, "target_modules": ["q_proj", "lm_head"]}}))
    ui.find("#export-form input[value='adapter']").click()
    ui.find("#export-button").click()
    ui.wait(lambda d: "lm_head" in ui.text("#export-error"))
    message = ui.text("#export-error")
    assert message.startswith("Export refused: ") and "ties" in message
    assert "Traceback" not in message and "/work" not in message and str(tmp_path) not in message
    assert len(client.get(url(job["id"]), headers=alice.headers).json()["data"]) == 1  # nothing more queued
    ui.assert_no_dialog()
    errors = ui.console_errors()  # Chromium logs each refused request's 400, and nothing else
    assert len(errors) == 2 and all("/exports" in e and "400" in e for e in errors), errors
