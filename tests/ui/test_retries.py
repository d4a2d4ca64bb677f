"""The dashboard rides out failed requests (issue 35, item 5), in Chromium against the live API behind a
fault-injecting proxy (tests/ui/faults.py): polls and the event stream are retried with backoff, never
before `Retry-After` (seconds or an HTTP date); a stream cut mid-event resumes with `Last-Event-ID`, so
every event shows exactly once; the status line says updates are delayed, then "Reconnected", then
clears; final errors (404, 401) are not retried."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from selenium.webdriver.common.by import By

from lcsb_service import transitions
from tests.api.conftest import LiveServer
from tests.api.helpers import job_ok
from tests.ui.conftest import UI, claim, write_training
from tests.ui.faults import Cut, Fail, FaultProxy, http_date_in, retry_after_s
from tests.ui.test_dashboard import all_events

JOBS = "/v1/fine_tuning/jobs"
RECORD_STATUS = """window.statusLog = [];
    const line = document.getElementById('live-status');
    new MutationObserver(() => {
      if (window.statusLog[window.statusLog.length - 1] !== line.textContent) window.statusLog.push(line.textContent);
    }).observe(line, {childList: true, characterData: true, subtree: true});"""


@pytest.fixture(scope="module")
def proxy(ui_server) -> Iterator[FaultProxy]:
    with FaultProxy(ui_server.url) as p:
        yield p


@pytest.fixture
def pui(browser, ui_server, proxy) -> UI:
    """The browser on the proxy in front of the live API (scripts and log emptied)."""
    proxy.reset()
    browser.get_log("browser")
    return UI(browser, LiveServer(url=proxy.url, pid=ui_server.pid))


def states(log: list[str]) -> list[str]:
    """The status line's texts with the countdown taken out, each change once."""
    out: list[str] = []
    for text in log:
        state = text.split(", retrying")[0]
        if not out or out[-1] != state:
            out.append(state)
    return out


def test_job_page_retries_after_503s_and_resumes_a_cut_stream_with_every_event_once(pui, proxy, alice, client, app):
    job = job_ok(client, alice, method={"lcsb": {"schedule": "cyclic", "k": 8}})
    claim(app, job["id"])
    write_training(app, job["id"], range(1, 7), total=12)  # 7 events: the start and 6 steps
    job_path = f"{JOBS}/{job['id']}"
    stream_path = job_path + "/events/stream"
    pui.sign_in(alice, "/ui/jobs")
    proxy.reset()
    proxy.script(job_path, Fail(503, retry_after="2"), Fail(503, retry_after="2"))
    proxy.script(stream_path, Cut(after_events=3), Fail(503, retry_after=http_date_in(2)), Fail(503, retry_after="1"))
    pui.get(f"/ui/jobs/{job['id']}")
    pui.wait_text("#live-status", "Updates delayed: the server is busy, retrying in ")
    line = pui.find("#live-status")
    assert line.get_attribute("role") == "status" and line.is_displayed()
    assert not pui.find("#not-found").is_displayed()  # a busy server is not a missing job
    pui.js(RECORD_STATUS)
    heatmap = pui.find("#heatmap")
    pui.wait(lambda d: heatmap.get_attribute("data-steps") == "6", 20)  # the job's data, after the 503s
    pui.wait(lambda d: [h.status for h in proxy.hits(stream_path)][:4] == [200, 503, 503, 200], 25)
    written = len(all_events(client, alice, job["id"]))  # the job's own (created, queued, ...) and the 7
    pui.wait(lambda d: len(pui.find_all("#events .message")) == written, 10)
    write_training(app, job["id"], range(7, 13), total=12, start=False, end=True)
    with app.state.db.session() as s:
        transitions.finish(s, job["id"], fine_tuned_model="ft:retries", trained_tokens=10)
    pui.wait(lambda d: d.find_element(By.TAG_NAME, "body").get_attribute("data-stream-done") == "true", 20)
    api_events = all_events(client, alice, job["id"])  # newest first
    assert [e.text for e in pui.find_all("#events .message")] == [e["message"] for e in api_events]
    assert len(api_events) == written + 8  # 6 steps, "Training finished", "succeeded": each once, none missing
    pui.wait_text("#job-status", "succeeded")
    pui.wait(lambda d: pui.text("#live-status") == "", 10)  # "Reconnected" clears

    oldest_first = [e["id"] for e in reversed(api_events)]
    streams = proxy.hits(stream_path)
    assert streams[0].last_event_id is None
    assert [h.last_event_id for h in streams[1:4]] == [oldest_first[2]] * 3  # resumed after the 3rd event
    assert all(h.last_event_id for h in streams[1:])
    for path in (job_path, stream_path):  # never back before Retry-After
        hits = proxy.hits(path)
        for before, after in zip(hits, hits[1:], strict=False):
            if before.status == 503:
                assert after.at >= retry_after_s(before), (path, before, after)
    polls = proxy.hits(job_path)
    assert [h.status for h in polls[:3]] == [503, 503, 200]
    assert 2.0 <= polls[1].at - polls[0].at < 3.0 and 2.0 <= polls[2].at - polls[1].at < 3.0
    seen = states(pui.js("return window.statusLog"))
    assert "Reconnected" in seen and seen[-1] == ""
    after_cut = seen[seen.index("Reconnected") + 1:]
    assert after_cut[0] == "Updates delayed: the connection was lost"
    assert after_cut[1:] == ["Updates delayed: the server is busy", "Reconnected", ""], seen


def test_jobs_list_backs_off_exponentially_and_keeps_polling(pui, proxy, alice, client, app):
    job = job_ok(client, alice)
    pui.sign_in(alice, "/ui/files")
    proxy.reset()
    proxy.script(JOBS, Fail(503, retry_after="1"), Fail(429, retry_after="2"), Fail(502))
    pui.get("/ui/jobs")
    pui.wait_text("#live-status", "Updates delayed: the server is busy, retrying in ")
    pui.js(RECORD_STATUS)
    claim(app, job["id"])
    pui.wait(lambda d: [r.get_attribute("data-status") for r in pui.find_all("#jobs-table tbody tr")] == ["running"],
             20)
    pui.wait(lambda d: pui.text("#live-status") == "", 10)
    hits = proxy.hits(JOBS)
    assert [h.status for h in hits[:4]] == [503, 429, 502, 200]
    gaps = [b.at - a.at for a, b in zip(hits, hits[1:4], strict=False)]
    assert 1.0 <= gaps[0] < 2.0 and 2.0 <= gaps[1] < 3.0  # Retry-After, above the backoff's 0.5-1 and 1-2 s
    assert 2.0 <= gaps[2] <= 4.5  # no Retry-After: the third step of the backoff, 2-4 s
    seen = states(pui.js("return window.statusLog"))
    assert "Updates delayed: the server answered HTTP 502" in seen and seen[-2:] == ["Reconnected", ""], seen


def test_final_errors_are_not_retried(pui, proxy, alice, client, app):
    job = job_ok(client, alice)
    claim(app, job["id"])
    write_training(app, job["id"], range(1, 3), total=40)
    job_path = f"{JOBS}/{job['id']}"
    stream_path = job_path + "/events/stream"
    pui.sign_in(alice, "/ui/jobs")
    proxy.reset()
    proxy.script(stream_path, Fail(404))  # e.g. the job went away while the page was open
    pui.get(f"/ui/jobs/{job['id']}")
    pui.wait(lambda d: pui.find("#not-found").is_displayed())
    time.sleep(3)  # past the 2 s poll and any backoff
    assert [h.status for h in proxy.hits(stream_path)] == [404]
    assert [h.status for h in proxy.hits(job_path)] == [200]  # the poll stopped with the page
    assert pui.text("#live-status") == ""
    proxy.script(stream_path, Fail(401))  # the key was revoked: the sign-in page, as for any 401
    pui.get(f"/ui/jobs/{job['id']}")
    pui.wait(lambda d: "/ui/sign-in?next=" in d.current_url)
    assert pui.js("return sessionStorage.getItem('lcsb_api_key')") is None
    assert len(proxy.hits(stream_path)) == 2
