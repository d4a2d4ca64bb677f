"""Job events: cursor pages (newest first) and the SSE stream with `Last-Event-ID` resume."""

from __future__ import annotations

import json

from lcsb_service import transitions
from lcsb_service.events import add_event
from tests.api.helpers import assert_error, job_ok


def sse(client, tenant, job_id: str, headers: dict | None = None, params: dict | None = None) -> list[dict]:
    """Read a whole (finite) stream; each SSE event as {"id", "event", "data"}."""
    events, current = [], {}
    with client.stream("GET", f"/v1/fine_tuning/jobs/{job_id}/events/stream", params=params,
                       headers={**tenant.headers, **(headers or {})}) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        for line in r.iter_lines():
            if not line:
                if current:
                    events.append(current)
                current = {}
            elif not line.startswith(":"):
                field, _, value = line.partition(": ")
                current[field] = json.loads(value) if field == "data" else value
    return events


def finished_job(client, tenant, app, n_events: int) -> str:
    job = job_ok(client, tenant)
    with app.state.db.session() as s:
        transitions.claim(s, job["id"])
        for i in range(n_events):
            add_event(s, job["id"], f"Step {i + 1}", type="metrics", data={"step": i + 1})
    with app.state.db.session() as s:
        transitions.finish(s, job["id"], fine_tuned_model="ft:x")
    return job["id"]


def test_event_pages_newest_first(client, alice, app):
    job_id = finished_job(client, alice, app, 5)
    everything = client.get(f"/v1/fine_tuning/jobs/{job_id}/events?limit=100", headers=alice.headers).json()
    messages = [e["message"] for e in everything["data"]]
    assert messages[0] == "The job has successfully completed" and messages[-1].startswith("Created fine-tuning job")
    assert len(messages) == 3 + 1 + 5 + 1 and not everything["has_more"]
    pages, after = [], None
    while True:
        params = {"limit": 4, **({"after": after} if after else {})}
        page = client.get(f"/v1/fine_tuning/jobs/{job_id}/events", params=params, headers=alice.headers).json()
        pages.append(page)
        if not page["has_more"]:
            break
        after = page["data"][-1]["id"]
    assert [len(p["data"]) for p in pages] == [4, 4, 2]
    assert [e["id"] for p in pages for e in p["data"]] == [e["id"] for e in everything["data"]]
    oldest = everything["data"][-1]["id"]
    tail = client.get(f"/v1/fine_tuning/jobs/{job_id}/events", params={"after": oldest}, headers=alice.headers)
    assert tail.json()["data"] == [] and tail.json()["has_more"] is False
    other = job_ok(client, alice)["id"]  # another job's event id is not a cursor of this list
    assert_error(client.get(f"/v1/fine_tuning/jobs/{other}/events", params={"after": oldest},
                            headers=alice.headers), 400, "invalid_cursor")


def test_sse_streams_all_events_then_done(client, alice, app):
    job_id = finished_job(client, alice, app, 3)
    events = sse(client, alice, job_id)
    listed = client.get(f"/v1/fine_tuning/jobs/{job_id}/events?limit=100", headers=alice.headers).json()["data"]
    assert [e["data"] for e in events[:-1]] == listed[::-1]  # same objects, oldest first
    assert all(e["id"] == e["data"]["id"] for e in events[:-1])
    assert events[-1] == {"event": "done", "data": {"status": "succeeded"}}


def test_sse_resumes_after_last_event_id(client, alice, app):
    job_id = finished_job(client, alice, app, 4)
    first = sse(client, alice, job_id)
    ids = [e["id"] for e in first[:-1]]
    resumed = sse(client, alice, job_id, headers={"Last-Event-ID": ids[4]})
    assert [e["id"] for e in resumed[:-1]] == ids[5:] and resumed[-1]["event"] == "done"
    by_query = sse(client, alice, job_id, params={"after": ids[-2]})
    assert [e["id"] for e in by_query[:-1]] == ids[-1:]
    at_end = sse(client, alice, job_id, headers={"Last-Event-ID": ids[-1]})
    assert at_end == [{"event": "done", "data": {"status": "succeeded"}}]
    assert_error(client.get(f"/v1/fine_tuning/jobs/{job_id}/events/stream", headers={
        **alice.headers, "Last-Event-ID": "ftevent-unknown"}), 400, "invalid_last_event_id", "Last-Event-ID")
