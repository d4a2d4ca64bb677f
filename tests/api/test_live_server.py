"""Against uvicorn in a child process: upload memory stays flat (a 5 MB upload, an over-cap upload
refused with 413), and a live SSE stream delivers events as they are written, then resumes.

Memory is the server process's peak resident set (VmHWM, reset through /proc/<pid>/clear_refs) above
its resident set before the request, in MiB. The client streams the multipart body in 1 MiB chunks."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import httpx
import pytest

from lcsb_service import transitions
from lcsb_service.events import add_event
from tests.api.helpers import MULTIPART_HEADERS, chat_lines, job_ok, multipart_stream

MIB = 2**20


def _status(pid: int) -> dict[str, int]:
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            fields[key] = int(value.split()[0]) * 1024
    return fields


def peak_growth_mib(pid: int, action) -> tuple[float, object]:  # a zero-argument callable
    """Run `action`; return (server peak RSS above its RSS before, in MiB; the action's result)."""
    Path(f"/proc/{pid}/clear_refs").write_text("5")  # reset VmHWM to the current RSS
    before = _status(pid)["VmRSS"]
    result = action()
    return (_status(pid)["VmHWM"] - before) / MIB, result


def post_stream(url: str, key: str, size: int) -> httpx.Response:
    return httpx.post(f"{url}/v1/files", content=multipart_stream(size), timeout=120,
                      headers={"Authorization": f"Bearer {key}", **MULTIPART_HEADERS})


@pytest.mark.skipif(not Path("/proc/self/clear_refs").exists(), reason="needs Linux /proc")
def test_upload_memory_is_flat(live_server, alice, settings, capsys):
    url, pid = live_server.url, live_server.pid
    for size in (64 * 1024, 2 * MIB):  # warm up: first-use imports and allocator pools
        assert post_stream(url, alice.key, size).status_code == 200
    line = chat_lines(1)
    five_mb = 5 * 10**6 // len(line) * len(line)  # whole lines, just under 5 MB
    grew_ok, ok = peak_growth_mib(pid, lambda: post_stream(url, alice.key, five_mb))
    assert ok.status_code == 200, ok.text
    body = ok.json()
    assert body["bytes"] == five_mb and body["status"] == "processed"
    assert body["validation"]["valid_examples"] == five_mb // len(line)
    over = settings.max_upload_bytes * 2 + MIB  # 17 MiB against an 8 MiB cap
    grew_over, refused = peak_growth_mib(pid, lambda: post_stream(url, alice.key, over))
    assert refused.status_code == 413 and refused.json()["error"]["code"] == "file_too_large"
    declared = b"x" * over
    grew_declared, refused2 = peak_growth_mib(pid, lambda: httpx.post(
        f"{url}/v1/files", content=declared, timeout=60,
        headers={"Authorization": f"Bearer {alice.key}", **MULTIPART_HEADERS}))
    assert refused2.status_code == 413
    with capsys.disabled():
        print(f"\n[upload memory] server peak RSS growth: 5 MB upload {grew_ok:.1f} MiB; "
              f"{over / MIB:.0f} MiB chunked over-cap (413) {grew_over:.1f} MiB; "
              f"{over / MIB:.0f} MiB declared over-cap (413) {grew_declared:.1f} MiB")
    assert grew_ok < 4.0 and grew_over < 4.0 and grew_declared < 4.0


def test_live_sse_delivers_and_resumes(live_server, client, alice, app):
    job_id = job_ok(client, alice)["id"]
    with app.state.db.session() as s:
        transitions.claim(s, job_id)
    received: list[dict] = []
    connected = threading.Event()

    def writer() -> None:
        connected.wait(10)
        for i in range(3):
            time.sleep(0.1)
            with app.state.db.session() as s:
                add_event(s, job_id, f"Step {i + 1}/3", type="metrics", data={"step": i + 1})
        with app.state.db.session() as s:
            transitions.finish(s, job_id, fine_tuned_model="ft:live")

    thread = threading.Thread(target=writer)
    thread.start()
    with httpx.stream("GET", f"{live_server.url}/v1/fine_tuning/jobs/{job_id}/events/stream", headers=alice.headers,
                      timeout=30) as r:
        assert r.status_code == 200
        current: dict = {}
        for line in r.iter_lines():
            connected.set()
            if line.startswith("data: "):
                current["data"] = json.loads(line[6:])
            elif line.startswith(("id: ", "event: ")):
                field, _, value = line.partition(": ")
                current[field] = value
            elif not line and current:
                received.append(current)
                current = {}
    thread.join()
    messages = [e["data"].get("message") for e in received[:-1]]
    assert messages[-4:] == ["Step 1/3", "Step 2/3", "Step 3/3", "The job has successfully completed"]
    assert received[-1] == {"event": "done", "data": {"status": "succeeded"}}
    resume_from = received[-4]["id"]  # after "Step 2/3"
    with httpx.stream("GET", f"{live_server.url}/v1/fine_tuning/jobs/{job_id}/events/stream", timeout=30,
                      headers={**alice.headers, "Last-Event-ID": resume_from}) as r:
        lines = [line for line in r.iter_lines() if line.startswith("data: ")]
    assert [json.loads(x[6:]).get("message") for x in lines] == ["Step 3/3", "The job has successfully completed",
                                                                 None]
