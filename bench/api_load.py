"""API latency under concurrent pollers, with a job training: p50 / p99 / max and error counts.

    .venv/bin/python bench/api_load.py                       # PostgreSQL 10/60/200, SQLite 100, SSE
    .venv/bin/python bench/api_load.py --seconds 5 --think 0.5 --levels 10,60,200 --sqlite-clients 100

Each world is real processes on loopback: the API (`uvicorn --factory api.main:create_app`, default
concurrency settings), one worker (`python -m worker`) training a long job on a tiny 3-layer model,
and PostgreSQL (127.0.0.1:5432, a fresh database, dropped after) + Redis (127.0.0.1:6379, keys under a
random prefix, removed after), or the embedded default (SQLite file + filesystem broker).

A client is one poll loop, as the official client's examples do: GET /v1/fine_tuning/jobs/{id}, then
`--think` seconds, for `--seconds`; all clients start together (one httpx connection each, 60 s
timeout). Latency is per request, at the client. An error is any answer other than 200 (counted by
status) or a transport error (counted by kind). The SSE row polls with `--sse-clients` pollers while
`--sse-streams` event streams of the job are held open. The clients run in this one process (asyncio),
on the same machine: their own CPU use is part of the figures.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import os
import secrets
import ssl
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import redis

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from lcsb_core.models.tiny import TINY, build_tiny_models  # noqa: E402
from lcsb_service.db import Database  # noqa: E402
from lcsb_service.devserver import fresh_postgres_database, migrate, settings_env, start_api  # noqa: E402
from lcsb_service.keys import create_key  # noqa: E402
from lcsb_service.settings import Settings, WorkerClass  # noqa: E402

REDIS_URL = "redis://127.0.0.1:6379/0"
PG_ADMIN_URL = os.environ.get("LCSB_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
SECRET = "bench-secret-" + "x" * 20
_TLS = ssl.create_default_context()  # one for all clients (loopback is plain HTTP; building one per client is slow)


@dataclass
class LoadResult:
    """What `poll_load` measured: latencies in ms, errors by kind (`503`, `ReadTimeout`, ...)."""

    clients: int
    seconds: float
    latencies_ms: list[float] = field(default_factory=list)
    errors: collections.Counter = field(default_factory=collections.Counter)

    @property
    def requests(self) -> int:
        return len(self.latencies_ms)

    def percentile(self, q: float) -> float:
        """The q-th percentile (0-100) of the latencies, ms (nearest rank)."""
        ordered = sorted(self.latencies_ms)
        return ordered[min(len(ordered) - 1, max(0, round(q / 100 * len(ordered)) - 1))] if ordered else float("nan")

    def row(self, label: str) -> str:
        errors = ", ".join(f"{k}: {v}" for k, v in sorted(self.errors.items())) or "0"
        return (f"| {label} | {self.clients} | {self.requests} | {self.requests / self.seconds:.0f} | "
                f"{self.percentile(50):.0f} | {self.percentile(99):.0f} | {max(self.latencies_ms, default=0):.0f} | "
                f"{errors} |")


async def poll_load(url: str, path: str, headers: dict[str, str], *, clients: int, think_s: float,
                    seconds: float | None = None, polls: int | None = None) -> LoadResult:
    """`clients` concurrent poll loops on `url + path`: each polls until `seconds` have passed or it
    made `polls` requests (one of the two is required), waiting `think_s` seconds between requests."""
    if (seconds is None) == (polls is None):
        raise ValueError("give exactly one of seconds and polls")
    result = LoadResult(clients=clients, seconds=0.0)
    start = time.perf_counter()

    async def one() -> None:
        made = 0
        async with httpx.AsyncClient(base_url=url, headers=headers, timeout=60.0, verify=_TLS,
                                     limits=httpx.Limits(max_connections=1)) as client:  # its own connection
            while (polls is None or made < polls) and (seconds is None or time.perf_counter() - start < seconds):
                t0 = time.perf_counter()
                try:
                    r = await client.get(path)
                    if r.status_code != 200:
                        result.errors[str(r.status_code)] += 1
                except httpx.HTTPError as exc:
                    result.errors[type(exc).__name__] += 1
                result.latencies_ms.append((time.perf_counter() - t0) * 1000)
                made += 1
                await asyncio.sleep(think_s)

    await asyncio.gather(*(one() for _ in range(clients)))
    result.seconds = time.perf_counter() - start
    return result


async def hold_streams(url: str, path: str, headers: dict[str, str], streams: int, seconds: float) -> tuple[int, int]:
    """Hold `streams` SSE streams on `path` open for `seconds`; returns (events received, failed streams)."""
    received, failed = 0, 0
    limits = httpx.Limits(max_connections=streams)
    async with httpx.AsyncClient(base_url=url, headers=headers, limits=limits, timeout=60.0) as client:
        async def one() -> None:
            nonlocal received, failed
            try:
                with_timeout = asyncio.timeout(seconds)
                async with with_timeout, client.stream("GET", path) as r:
                    if r.status_code != 200:
                        failed += 1
                        return
                    async for line in r.aiter_lines():
                        received += line.startswith("data:")
            except TimeoutError:
                pass  # held for the whole period
            except httpx.HTTPError:
                failed += 1

        await asyncio.gather(*(one() for _ in range(streams)))
    return received, failed


@contextmanager
def world(settings: Settings, log_dir: Path) -> Iterator[tuple[str, dict[str, str], str]]:
    """API + one worker on `settings`, a long job running; yields (API URL, auth headers, job id)."""
    env = {**os.environ, **settings_env(settings)}
    with Database(settings.resolved_database_url).session() as s:
        _, key = create_key(s, SECRET, f"bench-{secrets.token_hex(3)}")
    headers = {"Authorization": f"Bearer {key}"}
    api, url = start_api(settings)
    log = log_dir / f"worker-{secrets.token_hex(3)}.log"
    with open(log, "wb") as fh:
        worker = subprocess.Popen([sys.executable, "-m", "worker"], cwd=ROOT, env=env, stdout=fh, stderr=fh)
    try:
        deadline = time.monotonic() + 120
        while "LCSB worker ready" not in log.read_text(errors="replace"):
            if worker.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"worker did not start:\n{log.read_text()[-2000:]}")
            time.sleep(0.2)
        rows = "".join(json.dumps({"messages": [{"role": "user", "content": f"What is {i} plus {i}?"},
                                                {"role": "assistant", "content": f"{2 * i}, because numbers add"}]})
                       + "\n" for i in range(48))  # 2,400 steps: trains throughout
        r = httpx.post(f"{url}/v1/files", headers=headers, data={"purpose": "fine-tune"},
                       files={"file": ("train.jsonl", rows.encode())}, timeout=60)
        if r.status_code != 200:
            raise RuntimeError(f"upload refused: {r.text}")
        job = httpx.post(f"{url}/v1/fine_tuning/jobs", headers=headers, timeout=60, json={
            "model": TINY, "training_file": r.json()["id"], "seed": 1,
            "hyperparameters": {"batch_size": 2, "n_epochs": 100, "learning_rate": 1e-3},
            "method": {"quantization": "fp32", "max_seq_len": 64, "lora": {"rank": 2, "alpha": 4}, "lcsb": {"k": 1}}})
        if job.status_code != 200:
            raise RuntimeError(f"job creation refused: {job.text}")
        job_id = job.json()["id"]
        deadline = time.monotonic() + 120
        while httpx.get(f"{url}/v1/fine_tuning/jobs/{job_id}", headers=headers).json()["status"] != "running":
            if time.monotonic() > deadline:
                raise RuntimeError("the job did not start training")
            time.sleep(0.5)
        yield url, headers, job_id
        httpx.post(f"{url}/v1/fine_tuning/jobs/{job_id}/cancel", headers=headers, timeout=60)
    finally:
        for proc in (worker, api):
            proc.terminate()
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=8.0, help="per load level")
    parser.add_argument("--think", type=float, default=0.5, help="seconds between a client's polls")
    parser.add_argument("--levels", default="10,60,200", help="PostgreSQL client counts")
    parser.add_argument("--sqlite-clients", type=int, default=100)
    parser.add_argument("--sse-clients", type=int, default=200)
    parser.add_argument("--sse-streams", type=int, default=50)
    parser.add_argument("--postgres-admin-url", default=PG_ADMIN_URL,
                        help="a PostgreSQL connection allowed to CREATE DATABASE (default: LCSB_TEST_POSTGRES_URL)")
    args = parser.parse_args()

    header = ("| database | clients | requests | req/s | p50 ms | p99 ms | max ms | errors |\n"
              "|---|---:|---:|---:|---:|---:|---:|---|")
    rows: list[str] = []
    with tempfile.TemporaryDirectory(prefix="lcsb-load-") as tmp_name:
        tmp = Path(tmp_name)
        models = build_tiny_models(tmp / "models")
        common: dict[str, Any] = dict(environment="test", secret_key=SECRET, model_dirs=[models], min_examples=2,
                      worker_classes=[WorkerClass(queue=f"load-{secrets.token_hex(3)}", memory_mib=4096)])
        prefix = f"lcsbload-{secrets.token_hex(4)}:"
        with fresh_postgres_database(args.postgres_admin_url, "lcsb_load") as pg_url:
            pg = Settings(**common, database_url=pg_url, data_dir=tmp / "pg", broker_url=REDIS_URL,
                          broker_transport_options={"global_keyprefix": prefix})
            with world(pg, tmp) as (url, headers, job_id):
                path = f"/v1/fine_tuning/jobs/{job_id}"
                for clients in (int(c) for c in args.levels.split(",")):
                    res = asyncio.run(poll_load(url, path, headers, clients=clients, think_s=args.think,
                                                seconds=args.seconds))
                    rows.append(res.row("PostgreSQL"))
                    print(rows[-1], flush=True)

                async def with_streams() -> tuple[LoadResult, tuple[int, int]]:
                    streams = asyncio.create_task(hold_streams(url, f"{path}/events/stream", headers,
                                                               args.sse_streams, args.seconds + 2))
                    await asyncio.sleep(1)
                    res = await poll_load(url, path, headers, clients=args.sse_clients, think_s=args.think,
                                          seconds=args.seconds)
                    return res, await streams

                res, (events, failed) = asyncio.run(with_streams())
                rows.append(res.row(f"PostgreSQL + {args.sse_streams} SSE streams open "
                                    f"({events} events received, {failed} streams failed)"))
                print(rows[-1], flush=True)
        client = redis.Redis.from_url(REDIS_URL)
        for key in client.scan_iter(match=f"{prefix}*"):
            client.delete(key)
        embedded = Settings(**common, data_dir=tmp / "embedded")  # SQLite file + filesystem broker
        migrate(embedded.resolved_database_url)
        with world(embedded, tmp) as (url, headers, job_id):
            res = asyncio.run(poll_load(url, f"/v1/fine_tuning/jobs/{job_id}", headers,
                                        clients=args.sqlite_clients, think_s=args.think, seconds=args.seconds))
            rows.append(res.row("SQLite (embedded default)"))
            print(rows[-1], flush=True)
    print(f"\nGET /v1/fine_tuning/jobs/{{id}}, {args.seconds:g} s per row, {args.think:g} s between a client's polls, "
          f"a job training on the worker\n")
    print(header)
    print("\n".join(rows))


if __name__ == "__main__":
    main()
