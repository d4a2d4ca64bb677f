"""Fixtures of the dashboard's browser tests: the API under uvicorn (the app and database of
tests/api, on SQLite, the embedded default's database), Debian's Chromium driven by Selenium through
Debian's chromedriver, and helpers that sign in and write a job's events through the service's own
functions (the page reads them back through the real /v1 endpoints).

Chromium and chromedriver: `apt-get install -y chromium chromium-driver` (scripts/setup.sh does it
as root). Screenshots go to `runs/ui-screenshots/` (`LCSB_UI_SCREENSHOTS` to change it).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from selenium import webdriver
from selenium.common.exceptions import NoAlertPresentException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from lcsb_service import transitions
from lcsb_service.events import add_event, record_progress
from lcsb_service.ids import utcnow
from tests.api.conftest import LiveServer, Tenant, app, client, migrate, model_dir, new_tenant, serving_api, settings  # noqa: F401

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = os.environ.get("LCSB_CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("LCSB_CHROMEDRIVER", "/usr/bin/chromedriver")
SHOTS = Path(os.environ.get("LCSB_UI_SCREENSHOTS", ROOT / "runs" / "ui-screenshots"))
SSE_MAX_DURATION_S = 2.0  # streams end this often, so every page load also exercises the resume


@pytest.fixture(scope="session")
def database_url(tmp_path_factory) -> str:
    """One backend for the browser tests: SQLite, the embedded default (tests/api covers both)."""
    url = f"sqlite:///{tmp_path_factory.mktemp('ui-sqlite') / 'lcsb.sqlite3'}"
    migrate(url)
    return url


@pytest.fixture(scope="session")
def ui_server(settings) -> Iterator[LiveServer]:  # noqa: F811 - the fixture imported from tests.api.conftest
    with serving_api(settings, LCSB_ENQUEUER="lcsb_service.enqueue:LoggingEnqueuer",
                     LCSB_SSE_MAX_DURATION_S=str(SSE_MAX_DURATION_S), LCSB_SSE_POLL_INTERVAL_S="0.1") as server:
        yield server


@pytest.fixture(scope="session")
def download_dir() -> Iterator[Path]:
    folder = Path(tempfile.mkdtemp(prefix="lcsb-ui-downloads-"))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="session")
def browser(download_dir) -> Iterator[webdriver.Chrome]:
    """Headless Chromium, one for the session (each test signs in afresh)."""
    if not (Path(CHROMIUM).exists() and Path(CHROMEDRIVER).exists()):
        pytest.fail(f"Chromium ({CHROMIUM}) and chromedriver ({CHROMEDRIVER}) are needed: "
                    "apt-get install -y chromium chromium-driver (scripts/setup.sh)")
    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                "--window-size=1400,1800", "--disable-extensions", "--no-first-run"):
        opts.add_argument(arg)
    opts.add_experimental_option("prefs", {"download.default_directory": str(download_dir),
                                           "download.prompt_for_download": False})
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=opts, service=Service(CHROMEDRIVER))
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()


class UI:
    """The browser on the live server, with waits and helpers."""

    def __init__(self, driver: webdriver.Chrome, server: LiveServer) -> None:
        self.driver, self.url = driver, server.url

    def get(self, path: str) -> None:
        self.driver.get(self.url + path)

    def sign_in(self, tenant: Tenant, next_path: str = "/ui/jobs") -> None:
        self.get("/ui/sign-in")
        self.driver.execute_script("sessionStorage.clear()")
        self.get(next_path)  # redirected to the sign-in page, which comes back here
        self.wait(lambda d: "/ui/sign-in" in d.current_url)
        self.find("#api-key").send_keys(tenant.key)
        self.find("#sign-in-form button").click()
        self.wait(lambda d: "/ui/sign-in" not in d.current_url)

    def find(self, css: str):
        return self.driver.find_element(By.CSS_SELECTOR, css)

    def find_all(self, css: str) -> list:
        return self.driver.find_elements(By.CSS_SELECTOR, css)

    def text(self, css: str) -> str:
        return self.find(css).text

    def wait(self, condition: Callable, timeout: float = 15):
        return WebDriverWait(self.driver, timeout, poll_frequency=0.1).until(condition)

    def wait_text(self, css: str, contains: str, timeout: float = 15) -> str:
        self.wait(lambda d: any(contains in e.text for e in d.find_elements(By.CSS_SELECTOR, css)), timeout)
        return self.text(css)

    def pairs(self, css: str) -> dict[str, str]:
        """{th text: td text} of the rows under `css`, read in one go (pages re-render their tables)."""
        return self.js("""const out = {};
            for (const tr of document.querySelectorAll(arguments[0])) {
              const th = tr.querySelector('th'), td = tr.querySelector('td');
              if (th && td) out[th.textContent.trim()] = td.textContent;
            }
            return out;""", css)

    def rows(self, css: str) -> list[list[str]]:
        """The td texts of each row under `css`, read in one go."""
        return self.js("return Array.from(document.querySelectorAll(arguments[0]), "
                       "tr => Array.from(tr.querySelectorAll('td'), td => td.textContent))", css)

    def js(self, script: str, *args):
        return self.driver.execute_script(script, *args)

    def assert_no_dialog(self) -> None:
        """No alert/confirm/prompt opened (the dashboard opens none; a dialog means injected script)."""
        try:
            alert = self.driver.switch_to.alert
        except NoAlertPresentException:
            return
        text = alert.text
        alert.dismiss()
        raise AssertionError(f"a JavaScript dialog opened: {text!r}")

    def console_errors(self) -> list[str]:
        return [e["message"] for e in self.driver.get_log("browser") if e["level"] == "SEVERE"]

    def screenshot(self, name: str) -> Path:
        SHOTS.mkdir(parents=True, exist_ok=True)
        path = SHOTS / f"{name}.png"
        self.driver.save_screenshot(str(path))
        return path

    def painted_pixels(self, css: str) -> int:
        """Non-transparent, non-white pixels drawn on the canvases under `css` (0: nothing drawn)."""
        return self.js("""
            let n = 0;
            for (const c of document.querySelectorAll(arguments[0])) {
              const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
              for (let i = 0; i < d.length; i += 4)
                if (d[i + 3] > 0 && (d[i] < 200 || d[i + 1] < 200 || d[i + 2] < 200)) n++;
            }
            return n;""", css)


@pytest.fixture
def ui(browser, ui_server) -> Iterator[UI]:
    browser.get_log("browser")  # drop what earlier tests logged
    yield UI(browser, ui_server)
    try:
        browser.switch_to.alert.dismiss()
    except NoAlertPresentException:
        pass


@pytest.fixture
def alice(app) -> Tenant:  # noqa: F811 - the fixture imported from tests.api.conftest
    return new_tenant(app, "alice")


@pytest.fixture
def bob(app) -> Tenant:  # noqa: F811 - the fixture imported from tests.api.conftest
    return new_tenant(app, "bob")


LAYERS = 30  # SmolLM2-135M's decoder layers (the catalog's config in tests/api)


def cyclic_layers(step: int, k: int = 8) -> list[int]:
    """The layers LCSB cyclic trains at `step` (from 1, as events count): block (step-1) mod ceil(L/k)."""
    blocks = -(-LAYERS // k)
    start = ((step - 1) % blocks) * k
    return list(range(start, min(start + k, LAYERS)))


def write_training(app, job_id: str,  # noqa: F811 - the fixture of tests.api.conftest
                   steps: range, total: int, *, eval_every: int = 0, start: bool = True,
                   end: bool = False, loss0: float = 2.5, step_s: float | None = None) -> None:
    """Record what a worker's reporter records for `steps` of a running job: the start event, metrics
    events (train loss, selected layers, peak memory), eval events every `eval_every` steps, progress,
    and with `end` the "Training finished" event. With `step_s`, each event is dated as if a step took
    that long from the start (the events are written at once; the time charts read their dates)."""
    started = utcnow()

    def dated(event, step: int) -> None:
        if step_s is not None:
            event.created_at = started + timedelta(seconds=step * step_s)

    with app.state.db.session() as s:
        if start:
            add_event(s, job_id, f"Training started: {total} steps, cyclic k=8 of {LAYERS} layers",
                      data={"total_steps": total, "num_layers": LAYERS, "k": 8, "schedule": "cyclic"})
        for step in steps:
            loss = loss0 / (1 + 0.2 * step)
            dated(add_event(s, job_id, f"Step {step}/{total}: training loss={loss:.4f}", type="metrics",
                            data={"step": step, "total_steps": total, "train_loss": loss, "step_time_s": 0.5,
                                  "peak_memory_mib": 900.0 + step, "selected_layers": cyclic_layers(step)}), step)
            if eval_every and step % eval_every == 0:
                dated(add_event(s, job_id, f"Step {step}/{total}: validation loss={loss + 0.3:.4f}", type="metrics",
                                data={"step": step, "valid_loss": loss + 0.3, "valid_mean_token_accuracy": 0.5}), step)
        record_progress(s, job_id, steps_completed=steps[-1], total_steps=total, trained_tokens=100 * steps[-1],
                        peak_memory_mib=900.0 + steps[-1], elapsed_s=0.5 * steps[-1])
        if end:
            seconds = steps[-1] * (step_s or 0.5)
            dated(add_event(s, job_id, f"Training finished: {steps[-1]} steps in {seconds:.0f} s, peak memory "
                            f"{900 + steps[-1]} MiB", data={"steps": steps[-1], "train_seconds": seconds}), steps[-1])


def claim(app, job_id: str) -> None:  # noqa: F811 - the fixture imported from tests.api.conftest
    with app.state.db.session() as s:
        transitions.claim(s, job_id)


def wait_for(predicate: Callable[[], bool], timeout: float = 15) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("timed out")
        time.sleep(0.1)
