"""Issue 32's load target, through the whole service: 20 concurrent streaming clients over 5 adapters on
one inference worker (errors, complete streams, p50/p99 time to first token, tokens/s per stream), then
the worker's resident memory over 200 adapter switches.

    .venv/bin/python bench/serving_concurrency.py --out bench/results/serving_concurrency.json
    .venv/bin/python bench/serving_concurrency.py --clients 4 --switches 10 --tokens 16      # smoke
    .venv/bin/python bench/serving_concurrency.py --stack redis --database-url postgresql+psycopg://... \\
        --broker-url redis://127.0.0.1:6379/0                                                  # production shape

The stack: uvicorn API (the Celery enqueuer), one `python -m worker --kind training` to train the five
adapters, then for each `--sequences` setting S (default 1, 4, 8) one `python -m worker --kind inference`
with `LCSB_INFERENCE_MAX_SEQUENCES=S` (S = 1: Celery's solo pool, one request at a time, as before
continuous batching; S > 1: S threads whose requests the engine decodes together), side by side in
one run. `--stack embedded` (default) is README
command 1's: SQLite, the filesystem broker, file token streams; `--stack redis` uses the given
PostgreSQL and Redis (Redis Streams).

The five adapters are real: one short SmolLM2 job (fp32, LoRA rank 8, 10 steps at lr 1e-2 on 40 GSM8K
training questions from ../shared/data, a checkpoint every 2 steps): its `fine_tuned_model` and its four
checkpoints (steps 2, 4, 6, 8), each answering with its own adapter.

Part 1, per setting: one stream alone (`one_stream_tokens_per_s`: completion tokens / wall time), then
`--same-adapter-streams` (8) streams on one adapter at once (aggregate tokens/s and its ratio to one
stream), both text completions of one story opening (`STORY`, greedy: every answer runs to `--tokens`,
so decoding, not prefill, is what they time), then (`clients`) `--clients` threads start together,
client i streams a chat completion (the official `openai` client, temperature 0, `--tokens` new tokens,
a GSM8K test question of about 100 prompt tokens) from adapter i mod 5; the worker's adapter cache holds
all five (Settings defaults: 8 adapters, 512 MiB). `inference_max_pending` is set to the number of
clients, so the API's fast 503 (its default bound 16) is not what is measured. Reported: errors, streams
that ended without `finish_reason`, time to first token from the request's start (p50, p99, max: a solo
worker, S = 1, answers one request at a time, so the last client
waits for the nineteen before it), each stream's decode rate, and the wall time for all.

Part 2 (`switches`): a second inference worker with `inference_adapter_cache_count` 2, so that every
request in the cycle 1, 2, 3, 4, 5, 1, ... evicts an adapter and loads one (a switch each time), serves
`--switches` requests of 8 new tokens one after the other; the worker's VmRSS is read after each. Reported:
RSS after the first 10, at 50, 100, 150 and the end, the maximum, the least-squares slope over the second
half (MiB per switch) and the adapter loads the worker logged.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common.paths import DATA
from bench.common.results import write_result

ADAPTERS = 5


def vm_rss_mib(pid: int) -> float:
    """The process's resident set (VmRSS) in MiB, from /proc (Linux)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for process {pid}")


def p99(values: list[float]) -> float:
    """The 0.99 quantile, interpolated between closest ranks (`statistics.quantiles`' "inclusive" method,
    numpy's default)."""
    return statistics.quantiles(values, n=100, method="inclusive")[98] if len(values) > 1 else values[0]


def gsm8k_chat(path: Path, n: int) -> list[dict]:
    from lcsb_core.data.convert import gsm8k_to_chat

    rows = [json.loads(line) for line in path.read_text().splitlines()[:n]]
    return [gsm8k_to_chat(r) for r in rows]


class Proc:
    """A child process with its log in a file; `stop` sends SIGTERM then kills after 30 s."""

    def __init__(self, args: list[str], env: dict[str, str], log: Path, ready: str | None = None,
                 timeout_s: float = 180) -> None:
        self.log = log
        self._out = log.open("wb")
        self.p = subprocess.Popen(args, env=env, stdout=self._out, stderr=subprocess.STDOUT,
                                  cwd=Path(__file__).resolve().parents[1])
        deadline = time.monotonic() + timeout_s
        while ready and ready not in self.text():
            if self.p.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"{args} did not start:\n{self.text()[-3000:]}")
            time.sleep(0.2)

    def text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def stop(self) -> None:
        if self.p.poll() is None:
            self.p.terminate()
            try:
                self.p.wait(30)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait(10)
        self._out.close()


def train_adapters(url: str, key: str, base: str, data: list[dict]) -> list[str]:
    """The five model ids of one short real job: its checkpoints (steps 2, 4, 6, 8) and its
    fine_tuned_model. Raises RuntimeError when the job does not succeed within 20 min."""
    import httpx
    from openai import OpenAI

    oa = OpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0, timeout=120)
    f = oa.files.create(file=("gsm8k40.jsonl", "".join(json.dumps(r) + "\n" for r in data).encode()),
                        purpose="fine-tune")
    body = {"model": base, "training_file": f.id, "seed": 1, "suffix": "load",
            "hyperparameters": {"batch_size": 2, "max_steps": 10, "learning_rate": 1e-2},
            "method": {"quantization": "fp32", "max_seq_len": 256, "lora": {"rank": 8, "alpha": 16},
                       "lcsb": {"schedule": "full"}, "save_every": 2}}
    r = httpx.post(f"{url}/v1/fine_tuning/jobs", json=body, headers={"Authorization": f"Bearer {key}"}, timeout=30)
    r.raise_for_status()
    job_id = r.json()["id"]
    deadline = time.monotonic() + 1200
    while (job := oa.fine_tuning.jobs.retrieve(job_id)).status not in ("succeeded", "failed", "cancelled"):
        if time.monotonic() > deadline:
            raise RuntimeError(f"job {job_id} still {job.status}")
        time.sleep(2)
    if job.status != "succeeded":
        raise RuntimeError(f"job {job_id} {job.status}: {job.error}")
    ckpts = sorted(oa.fine_tuning.jobs.checkpoints.list(job_id), key=lambda c: c.step_number)
    ids = [c.fine_tuned_model_checkpoint for c in ckpts] + [str(job.fine_tuned_model)]
    if len(ids) < ADAPTERS:
        raise RuntimeError(f"job {job_id} gave {len(ids)} models, not {ADAPTERS}: {ids}")
    return ids[-ADAPTERS:]


STORY = "Once upon a time, in a small village by the sea, there lived"   # a text that goes on (completions)


def one_stream(oa: Any, model: str, question: str, tokens: int, t_start: float) -> dict[str, Any]:
    """Stream one chat completion of `question` (or, when `question` is `STORY`, a text completion of
    it: an answer that runs to `tokens`); times from `t_start` (the common start, perf_counter seconds)."""
    first = last = 0.0
    finish, completion, err = None, 0, None
    pieces = 0
    try:
        chunks = (oa.completions.create(model=model, prompt=STORY, temperature=0, max_tokens=tokens, stream=True,
                                        stream_options={"include_usage": True}) if question == STORY else
                  oa.chat.completions.create(model=model, messages=[{"role": "user", "content": question}],
                                             temperature=0, max_completion_tokens=tokens, stream=True,
                                             stream_options={"include_usage": True}))
        for chunk in chunks:
            if chunk.choices:
                c = chunk.choices[0]
                if (c.text if question == STORY else c.delta.content):
                    last = time.perf_counter()
                    first = first or last
                    pieces += 1
                if c.finish_reason:
                    finish = c.finish_reason
            if chunk.usage:
                completion = chunk.usage.completion_tokens
    except Exception as exc:  # noqa: BLE001 - recorded: the benchmark counts errors, it does not stop at the first
        err = f"{type(exc).__name__}: {exc}"
    return {"model": model, "error": err, "finish_reason": finish, "completion_tokens": completion,
            "pieces": pieces, "ttft_s": first - t_start if first else None, "done_s": time.perf_counter() - t_start,
            "decode_tokens_per_s": (completion - 1) / (last - first) if last > first and completion > 1 else None}


def clients_part(url: str, key: str, models: list[str], questions: list[str], clients: int,
                 tokens: int, warm: bool = True) -> dict[str, Any]:
    from openai import OpenAI

    oa = OpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0, timeout=900)
    # one warm request per adapter first: the base's load and each adapter's first conversion are the
    # "first request after a job" case, measured elsewhere (bench/serving_speed.py)
    for m in models if warm else []:
        one_stream(oa, m, questions[0], 2, time.perf_counter())
    results: list[dict[str, Any]] = [{} for _ in range(clients)]
    barrier = threading.Barrier(clients + 1)
    t_start = [0.0]

    def run(i: int) -> None:
        barrier.wait()
        results[i] = one_stream(oa, models[i % len(models)], questions[i % len(questions)], tokens, t_start[0])

    threads = [threading.Thread(target=run, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    t_start[0] = time.perf_counter()
    barrier.wait()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t_start[0]
    ok = [r for r in results if r["error"] is None]
    ttft = [r["ttft_s"] for r in ok if r["ttft_s"] is not None]
    rates = [r["decode_tokens_per_s"] for r in ok if r["decode_tokens_per_s"]]
    return {
        "clients": clients, "adapters": len(models), "tokens": tokens,
        "errors": len(results) - len(ok),
        "incomplete": sum(1 for r in ok if r["finish_reason"] not in ("stop", "length")),
        "ttft_p50_s": statistics.median(ttft) if ttft else None,
        "ttft_p99_s": p99(ttft) if ttft else None,
        "ttft_max_s": max(ttft) if ttft else None,
        "decode_tokens_per_s_p50": statistics.median(rates) if rates else None,
        "decode_tokens_per_s_min": min(rates) if rates else None,
        "completion_tokens": sum(r["completion_tokens"] for r in ok),
        "wall_s": wall,
        "streams": results,
    }


def switches_part(url: str, key: str, models: list[str], question: str, switches: int, worker: Proc) -> dict[str, Any]:
    from openai import OpenAI

    oa = OpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0, timeout=300)
    rss, errors = [], 0
    for i in range(switches):
        r = oa.chat.completions.create(model=models[i % len(models)], messages=[{"role": "user", "content": question}],
                                       temperature=0, max_completion_tokens=8)
        errors += r.choices[0].finish_reason not in ("stop", "length")
        rss.append(vm_rss_mib(worker.p.pid))
    loads = [int(m) for m in re.findall(r"loaded (\d+) so far", worker.text())]
    half = rss[len(rss) // 2:]
    return {
        "switches": switches, "cache_count": 2, "incomplete": errors,
        "rss_mib_after_10": rss[min(9, len(rss) - 1)],
        "rss_mib_at": {str(n): rss[n - 1] for n in (50, 100, 150, switches) if n <= len(rss)},
        "rss_mib_max": max(rss), "rss_mib_first": rss[0],
        "rss_slope_mib_per_switch_second_half": statistics.linear_regression(range(len(half)), half).slope,
        "adapter_loads_logged": loads[-1] if loads else None,
        "rss_mib": rss,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--stack", choices=["embedded", "redis"], default="embedded")
    ap.add_argument("--database-url", default=None, help="--stack redis: a PostgreSQL URL (a fresh database)")
    ap.add_argument("--broker-url", default="redis://127.0.0.1:6379/0", help="--stack redis: Redis")
    ap.add_argument("--clients", type=int, default=20)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--switches", type=int, default=200)
    ap.add_argument("--threads", type=int, default=0, help="the inference worker's threads (0: its own rule)")
    ap.add_argument("--sequences", type=lambda v: [int(x) for x in v.split(",")], default=[1, 4, 8],
                    help="LCSB_INFERENCE_MAX_SEQUENCES settings, one inference worker each, side by side")
    ap.add_argument("--same-adapter-streams", type=int, default=8, help="concurrent streams on one adapter")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    started = datetime.now(UTC)
    load_before = list(os.getloadavg())

    import secrets

    from bench.common.service import migrated_with_key
    from lcsb_core.models.gguf_import import ensure_default_model
    from lcsb_service.devserver import fresh_postgres_database, settings_env, start_api
    from lcsb_service.settings import Settings

    base = ensure_default_model()
    tmp = Path(tempfile.mkdtemp(prefix="lcsb-concurrency-bench-"))
    extra: dict[str, Any] = {}
    pg = None
    if args.stack == "redis":
        if not args.database_url:
            ap.error("--stack redis needs --database-url (an admin URL: a fresh database is made under it)")
        pg = fresh_postgres_database(args.database_url, "lcsb_conc_bench")
        extra = {"database_url": pg.__enter__(), "broker_url": args.broker_url,
                 "broker_transport_options": {"global_keyprefix": f"bench-{secrets.token_hex(3)}:"}}
    if args.threads:
        extra["worker_torch_threads"] = args.threads
    settings = Settings(data_dir=tmp / "var", model_dirs=[base.parent], inference_max_pending=max(16, args.clients),
                        inference_start_timeout_s=900, **extra)
    key = migrated_with_key(settings)
    env = {**os.environ, **settings_env(settings)}
    worker_cmd = [sys.executable, "-m", "worker", "--kind"]
    api, url = start_api(settings, log_file=tmp / "api.log", LCSB_ENQUEUER="worker.enqueue:CeleryEnqueuer")
    procs: list[Proc] = []
    try:
        train = Proc(worker_cmd + ["training"], env, tmp / "training.log", "LCSB worker ready")
        procs.append(train)
        t0 = time.perf_counter()
        models = train_adapters(url, key, base.name, gsm8k_chat(DATA / "gsm8k" / "train.jsonl", 40))
        train_s = time.perf_counter() - t0
        train.stop()
        questions = [r["messages"][0]["content"] for r in gsm8k_chat(DATA / "gsm8k" / "test.jsonl", args.clients)]
        print(f"trained {len(models)} adapters in {train_s:.0f} s", flush=True)

        per_setting: dict[str, Any] = {}
        for sequences in args.sequences:
            env1 = {**env, "LCSB_INFERENCE_MAX_SEQUENCES": str(sequences)}
            inf = Proc(worker_cmd + ["inference"], env1, tmp / f"inference-{sequences}.log", "LCSB worker ready")
            procs.append(inf)
            one = clients_part(url, key, models[:1], [STORY], 1, args.tokens)
            same = clients_part(url, key, models[:1], [STORY], args.same_adapter_streams, args.tokens, warm=False)
            part1 = clients_part(url, key, models, questions, args.clients, args.tokens)
            part1["worker_rss_mib_after"] = vm_rss_mib(inf.p.pid)
            inf.stop()
            engine = re.search(r"loaded base \S+ \(([^,]+), ([^,]+), (\d+) threads, (\d+) sequences", inf.text())
            rate = lambda r: r["completion_tokens"] / r["wall_s"]  # noqa: E731 - aggregate tokens/s of a part
            per_setting[str(sequences)] = {
                "engine": engine.groups() if engine else None,
                "one_stream_tokens_per_s": rate(one), "one_stream": one,
                "same_adapter_tokens_per_s": rate(same), "same_adapter_vs_one": rate(same) / rate(one),
                "same_adapter": same, "clients": part1}
            print(f"max_sequences {sequences}: one stream {rate(one):.1f} tok/s; {args.same_adapter_streams} streams "
                  f"on one adapter {rate(same):.1f} tok/s ({rate(same) / rate(one):.2f}x); {args.clients} clients: "
                  f"{part1['errors']} errors, {part1['incomplete']} incomplete, TTFT p50 {part1['ttft_p50_s']:.2f} s "
                  f"p99 {part1['ttft_p99_s']:.2f} s, decode p50 {part1['decode_tokens_per_s_p50']:.1f} tok/s, all in "
                  f"{part1['wall_s']:.1f} s", flush=True)

        env2 = {**env, "LCSB_INFERENCE_ADAPTER_CACHE_COUNT": "2"}
        inf2 = Proc(worker_cmd + ["inference"], env2, tmp / "inference-switches.log", "LCSB worker ready")
        procs.append(inf2)
        part2 = switches_part(url, key, models, questions[0], args.switches, inf2)
        print(f"{args.switches} switches: RSS {part2['rss_mib_first']:.0f} -> after 10 {part2['rss_mib_after_10']:.0f}"
              f" -> end {part2['rss_mib'][-1]:.0f} MiB (max {part2['rss_mib_max']:.0f}), slope over the second half "
              f"{part2['rss_slope_mib_per_switch_second_half']:+.3f} MiB/switch, {part2['adapter_loads_logged']} "
              f"adapter loads logged", flush=True)
        engine = re.search(r"loaded base \S+ \(([^,]+), ([^,]+), (\d+) threads, (\d+) sequences", inf2.text())
        result = {"stack": args.stack, "adapters_trained_s": train_s, "models": models,
                  "engine": engine.groups() if engine else None, "max_sequences": per_setting, "switches": part2,
                  "load_average_after": list(os.getloadavg())}
        if args.out:
            write_result(args.out, result, vars(args) | {"out": str(args.out)}, started=started,
                         load_before=load_before, command=sys.argv)
    finally:
        for p in procs:
            p.stop()
        api.terminate()
        api.wait(10)
        if pg is not None:
            pg.__exit__(None, None, None)


if __name__ == "__main__":
    main()
