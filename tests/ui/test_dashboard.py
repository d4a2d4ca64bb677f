"""The dashboard in a real browser (headless Chromium via Selenium) against uvicorn: sign-in and
sign-out, files with their validation report, the create-job form (estimate, field errors), a job
page filled from the job's event stream (charts, heatmap, events, memory, downloads, cancel), compare,
owner isolation, and hostile names rendered as text.

Jobs are created through the real /v1 routes (the form or the API); what a worker would record while
training is written with the service's own functions (`lcsb_service.events`, `transitions`,
`artifacts`) and read back by the pages through /v1 only."""

from __future__ import annotations

import tarfile
import time

from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select

from lcsb_service import transitions
from lcsb_service.artifacts import publish_run
from lcsb_service.events import add_event
from tests.api.helpers import chat_lines, fake_run, job_ok, upload_ok
from tests.ui.conftest import LAYERS, claim, cyclic_layers, wait_for, write_training

HOSTILE_NAME = "<img src=x onerror=alert(1)>.jsonl"
HOSTILE_EVENT = "<script>alert(2)</script><img src=x onerror=alert(3)> & <b>bold</b>"


def test_sign_in_keeps_the_key_out_of_urls_and_sign_out_clears_it(ui, alice):
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
    assert ui.console_errors() == [] or all("401" in e for e in ui.console_errors())
