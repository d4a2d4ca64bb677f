"""The dashboard end to end against a live API and a real worker on the embedded default (SQLite,
kombu's filesystem broker, local storage; the processes of scripts/main_job.sh): in headless Chromium,
sign in, upload real GSM8K chat examples (made with `lcsb gsm8k-to-chat`), create a small job from the
form (SmolLM2-135M-Instruct in NF4, LCSB cyclic k=8 of 30 layers, 4 steps), follow it on the job page
to `succeeded` with the loss chart drawn and the selection heatmap filled from what the worker
recorded, and download the adapter. Nothing is faked: every value the page shows came from the worker
through /v1. Bound: 300 s for the job (about 1-2 minutes on 2 CPU cores)."""

from __future__ import annotations

import hashlib
import subprocess
import sys
import tarfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from selenium.webdriver.support.ui import Select

from lcsb_core.models.gguf_import import ensure_default_model
from lcsb_service.db import Database
from lcsb_service.keys import create_key
from lcsb_service.settings import Settings, WorkerClass
from tests.api.conftest import SECRET, LiveServer, Tenant, migrate, serving_api, settings_env
from tests.ui.conftest import UI, wait_for
from tests.worker.conftest import start_worker  # noqa: F401 - the fixture

pytestmark = [pytest.mark.integration, pytest.mark.worker]
ROOT = Path(__file__).resolve().parents[2]
GSM8K = ROOT.parent / "shared" / "data" / "gsm8k"
QUEUE = "cpu-ui"
EXAMPLES, STEPS, K, LAYERS = 32, 4, 8, 30  # cyclic k=8 of 30 layers: blocks 0-7, 8-15, 16-23, 24-29
JOB_BOUND_S = 300.0


@pytest.fixture
def embedded(tmp_path) -> Settings:
    """The embedded default's settings (database, broker folder and storage under one data folder),
    with the imported SmolLM2-135M-Instruct as the catalog and one CPU worker class."""
    settings = Settings(environment="test", secret_key=SECRET, data_dir=tmp_path / "var", broker_url="filesystem://",
                        model_dirs=[ensure_default_model().parent], min_examples=10, sse_poll_interval_s=0.2,
                        worker_classes=[WorkerClass(queue=QUEUE, memory_mib=6144)], worker_torch_threads=1)
    assert settings.database_url is None and settings.storage_url is None  # the defaults under data_dir
    assert settings_env(settings)["LCSB_WORKER_TORCH_THREADS"] == "1"  # the worker's environment
    migrate(settings.resolved_database_url)
    return settings


@pytest.fixture
def service(embedded, start_worker) -> Iterator[LiveServer]:  # noqa: F811 - the fixture imported above
    """The API under uvicorn sending jobs with the Celery enqueuer, and one real worker."""
    worker = start_worker(embedded)
    assert worker.proc.poll() is None
    with serving_api(embedded, LCSB_ENQUEUER="worker.enqueue:CeleryEnqueuer") as server:
        yield server


@pytest.fixture
def owner(embedded) -> Tenant:
    db = Database(embedded.resolved_database_url)
    try:
        with db.session() as s:
            row, key = create_key(s, SECRET, "ui-real-worker")
            return Tenant(name="ui-real-worker", owner_id=row.owner_id, key=key)
    finally:
        db.dispose()


def gsm8k_chat(path: Path, limit: int) -> Path:
    """`lcsb gsm8k-to-chat` on the first `limit` GSM8K training rows."""
    assert (GSM8K / "train.jsonl").is_file(), f"GSM8K missing at {GSM8K}"
    subprocess.run([str(Path(sys.executable).parent / "lcsb"), "gsm8k-to-chat", str(GSM8K / "train.jsonl"),
                    str(path), "--limit", str(limit)], check=True, capture_output=True)
    assert len(path.read_text().splitlines()) == limit
    return path


def all_events(url: str, tenant: Tenant, job_id: str) -> list[dict]:
    """The job's events through /v1, newest first (the order of the API and of the page)."""
    out: list[dict] = []
    after = None
    while True:
        page = httpx.get(f"{url}/v1/fine_tuning/jobs/{job_id}/events", headers=tenant.headers,
                         params={"limit": 100, **({"after": after} if after else {})}).json()
        out += page["data"]
        if not page["has_more"]:
            return out
        after = page["data"][-1]["id"]


def test_a_job_created_in_the_form_trains_on_a_real_worker_and_its_page_shows_it(
        browser, download_dir, service, owner, tmp_path):
    browser.get_log("browser")  # drop what earlier tests logged
    ui = UI(browser, service)
    train = gsm8k_chat(tmp_path / "gsm8k_train.jsonl", EXAMPLES)

    ui.sign_in(owner, "/ui/files")
    ui.find("#upload-file").send_keys(str(train))
    ui.find("#upload-form button").click()
    ui.wait(lambda d: ui.text("#upload-status").startswith(("Uploaded", "Upload failed")), 30)
    assert ui.text("#upload-status").startswith("Uploaded file-")
    assert ui.text("#report-status") == "Valid: ready for training."
    counts = ui.pairs("#report-counts tr")
    assert (counts["valid examples"], counts["invalid examples"], counts["format"]) == (str(EXAMPLES), "0", "chat")
    file_id = ui.text("#upload-status").split()[1].rstrip(":.")

    ui.get("/ui/jobs/new")
    ui.wait(lambda d: ui.find_all("#f-training option") and ui.find_all("#f-model option"))
    Select(ui.find("#f-model")).select_by_value("SmolLM2-135M-Instruct")
    assert Select(ui.find("#f-training")).first_selected_option.get_attribute("value") == file_id
    Select(ui.find("#f-schedule")).select_by_visible_text("cyclic")
    ui.find("#f-k").send_keys(str(K))
    ui.find("#f-lr").send_keys("0.0003")
    ui.find("#f-steps").send_keys(str(STEPS))
    ui.wait(lambda d: ui.pairs("#estimate-table tr").get("layers per step") == str(K), 30)
    assert ui.find("body").get_attribute("data-estimated") == QUEUE and ui.text("#form-error") == ""
    ui.find("#submit-job").click()
    ui.wait(lambda d: "/ui/jobs/ftjob-" in d.current_url)
    job_id = ui.driver.current_url.rsplit("/", 1)[1]
    job = httpx.get(f"{service.url}/v1/fine_tuning/jobs/{job_id}", headers=owner.headers).json()
    assert (job["model"], job["training_file"], job["queue"]) == ("SmolLM2-135M-Instruct", file_id, QUEUE)
    assert job["method"]["quantization"] == "nf4" and job["method"]["lcsb"]["schedule"] == "cyclic"
    assert job["method"]["lcsb"]["layers_per_step"] == K and job["hyperparameters"]["max_steps"] == STEPS

    t0 = time.monotonic()
    body = ui.find("body")
    ui.wait(lambda d: body.get_attribute("data-stream-done") == "true", JOB_BOUND_S)
    elapsed = time.monotonic() - t0
    job = httpx.get(f"{service.url}/v1/fine_tuning/jobs/{job_id}", headers=owner.headers).json()
    events = all_events(service.url, owner, job_id)
    assert job["status"] == "succeeded", (job.get("error"), [e["message"] for e in events][:10])
    ui.wait_text("#job-status", "succeeded")
    assert ui.text("#job-progress-text").startswith(f"{STEPS}/{STEPS} steps (100%) · finished ")
    assert ui.find("#job-progress").get_attribute("value") == "100"
    assert not ui.find("#cancel-button").is_displayed()

    # the heatmap: the layers each step trained, as the worker recorded them (cyclic: each layer once)
    steps = {e["data"]["step"]: e["data"]["selected_layers"] for e in events
             if e["type"] == "metrics" and "selected_layers" in (e["data"] or {})}
    assert sorted(steps) == list(range(1, STEPS + 1))
    assert sorted(layer for layers in steps.values() for layer in layers) == list(range(LAYERS))
    assert steps[1] == list(range(K)) and steps[STEPS] == list(range(3 * K, LAYERS))
    heatmap = ui.find("#heatmap")
    ui.wait(lambda d: heatmap.get_attribute("data-steps") == str(STEPS))
    assert heatmap.get_attribute("data-filled") == str(LAYERS)
    ui.wait(lambda d: heatmap.get_attribute("data-shaded") == str(STEPS), 30)  # selection_history.jsonl read
    assert ui.text("#heatmap-caption").startswith(f"{STEPS} steps, {LAYERS} layers. Shaded by")
    assert ui.painted_pixels("#heatmap") > 20000  # 30 of 120 cells of about 225 x 8 pixels, plus labels
    cell = ui.js("""const c = document.getElementById('heatmap'), ctx = c.getContext('2d');
        const cw = (c.width - 34) / arguments[0], ch = (c.height - 18) / arguments[1];
        const probe = (step, layer) => Array.from(ctx.getImageData(34 + (step - 0.5) * cw,
                                                                   (arguments[1] - 0.5 - layer) * ch, 1, 1).data);
        return [probe(1, 0), probe(1, arguments[1] - 1), probe(arguments[0], arguments[1] - 1)];""", STEPS, LAYERS)
    assert cell[1][:3] == [244, 244, 246]  # layer 29 did not train at step 1: background
    for trained in (cell[0], cell[2]):  # layer 0 at step 1, layer 29 at step 4: blue, shaded by gradient norm
        assert trained[2] > trained[0] and trained[:3] != [244, 244, 246], cell

    # the loss charts: one train-loss point per step (no validation file: no eval series)
    train_losses = [e["data"]["train_loss"] for e in sorted(events, key=lambda e: e["created_at"])
                    if e["type"] == "metrics" and "train_loss" in (e["data"] or {})]
    assert len(train_losses) == STEPS and all(0 < x < 10 for x in train_losses)
    ui.wait(lambda d: ui.find("#chart-step").get_attribute("data-points") == f"{STEPS},0")
    assert ui.find("#chart-time").get_attribute("data-points") == f"{STEPS},0"
    assert ui.painted_pixels("#chart-step canvas") > 300 and ui.painted_pixels("#chart-time canvas") > 300

    # events, memory, resolved config: what the worker recorded
    assert [e.text for e in ui.find_all("#events .message")] == [e["message"] for e in events]
    assert any(e["message"].startswith("Training finished") for e in events)
    memory = ui.pairs("#memory-table tr")
    peak = job["progress"]["peak_memory_mib"]
    assert peak and memory["measured peak (MiB)"] == f"{peak:.1f}"
    assert float(memory["estimated peak (MiB)"]) == round(job["memory_estimate"]["total_mib"], 1)
    ui.wait(lambda d: ui.find("#config").get_attribute("data-loaded") == "true", 30)
    assert '"schedule": "cyclic"' in ui.text("#config") and str(tmp_path) not in ui.text("#config")
    ui.wait(lambda d: "adapter.tar.gz" in ui.js(
        "return Array.from(document.querySelectorAll('#artifacts a.download'), a => a.textContent)"))
    ui.screenshot("job-real-worker")

    # the adapter, downloaded by the page: a valid tar.gz with the PEFT adapter, the bytes /v1 serves
    ui.js("Array.from(document.querySelectorAll('#artifacts a.download'))"
          ".find(a => a.textContent === 'adapter.tar.gz').click()")
    target = download_dir / f"{job_id}-adapter.tar.gz"
    wait_for(lambda: target.exists() and target.stat().st_size > 0, 30)
    with tarfile.open(target, "r:gz") as tar:
        names = tar.getnames()
        assert {"adapter/adapter_config.json", "adapter/adapter_model.safetensors"} <= set(names), names
        assert tar.getmember("adapter/adapter_model.safetensors").size > 100_000
    served = httpx.get(f"{service.url}/v1/fine_tuning/jobs/{job_id}/artifacts/adapter.tar.gz",
                       headers=owner.headers, timeout=60)
    assert served.status_code == 200
    assert hashlib.sha256(served.content).hexdigest() == hashlib.sha256(target.read_bytes()).hexdigest()
    ui.assert_no_dialog()
    assert ui.console_errors() == []
    print(f"[ui-real-worker] submit to succeeded on the page: {elapsed:.0f} s")

