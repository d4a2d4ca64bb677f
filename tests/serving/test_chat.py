"""Chat and completions through the official `openai` client against the API under uvicorn and a real
inference worker process serving the real SmolLM2-135M-Instruct (PostgreSQL + Redis): streamed and
not, usage, stop, length, a fixed seed, a real job's `ft:` id and checkpoint id answering with their
own adapters, 404 `model_not_found` (another owner's, deleted, typo), 400 per unsupported parameter,
an error mid-stream raising in the client, and a client disconnect stopping the worker."""

from __future__ import annotations

import re
import time

import httpx
import openai
import pytest
import redis

from tests.worker.conftest import REDIS_URL

pytestmark = [pytest.mark.integration, pytest.mark.worker]
SMOL = "SmolLM2-135M-Instruct"
ASK = [{"role": "user", "content": "What is 2+2? Answer briefly."}]


def chat_text(oa, model: str, **kw) -> str:
    r = oa.chat.completions.create(model=model, messages=kw.pop("messages", ASK), **kw)
    return r.choices[0].message.content


def test_chat_streamed_and_not(world):
    oa = world.oa(world.alice)
    r = oa.chat.completions.create(model=SMOL, messages=ASK, temperature=0, max_completion_tokens=3)
    assert r.object == "chat.completion" and r.model == SMOL and r.id.startswith("chatcmpl-")
    assert r.choices[0].finish_reason == "length" and r.choices[0].message.role == "assistant"
    assert r.usage.completion_tokens == 3 and r.usage.prompt_tokens > 10
    assert r.usage.total_tokens == r.usage.prompt_tokens + 3

    whole = oa.chat.completions.create(model=SMOL, messages=ASK, temperature=0.9, seed=7, max_tokens=12)
    again = oa.chat.completions.create(model=SMOL, messages=ASK, temperature=0.9, seed=7, max_tokens=12)
    assert whole.choices[0].message.content == again.choices[0].message.content  # a fixed seed reproduces
    chunks = list(oa.chat.completions.create(model=SMOL, messages=ASK, temperature=0.9, seed=7, max_tokens=12,
                                             stream=True, stream_options={"include_usage": True}))
    assert len({c.id for c in chunks}) == 1 and len({c.created for c in chunks}) == 1
    assert chunks[0].choices[0].delta.role == "assistant" and chunks[0].choices[0].delta.content == ""
    assert chunks[-1].choices == [] and chunks[-1].usage.total_tokens == whole.usage.total_tokens
    assert chunks[-2].choices[0].finish_reason == whole.choices[0].finish_reason
    assert all(c.usage is None for c in chunks[:-1])
    streamed = "".join(c.choices[0].delta.content or "" for c in chunks[1:-2])
    assert streamed == whole.choices[0].message.content and len(chunks) > 4

    # stop: the answer ends before the stop sequence, which is not returned
    full = chat_text(oa, SMOL, temperature=0, max_tokens=16)
    assert "4" in full, full
    stopped = oa.chat.completions.create(model=SMOL, messages=ASK, temperature=0, max_tokens=16, stop=["4"])
    assert stopped.choices[0].finish_reason == "stop"
    assert stopped.choices[0].message.content == full[:full.index("4")]
    plain = list(oa.chat.completions.create(model=SMOL, messages=ASK, temperature=0, max_tokens=16, stream=True))
    assert [c.usage for c in plain] == [None] * len(plain) and plain[-1].choices[0].finish_reason == "stop"


def test_completions_streamed_and_not(world):
    oa = world.oa(world.alice)
    r = oa.completions.create(model=SMOL, prompt="The capital of France is", max_tokens=5, temperature=0)
    assert r.object == "text_completion" and r.choices[0].finish_reason == "length" and r.usage.completion_tokens == 5
    chunks = list(oa.completions.create(model=SMOL, prompt="The capital of France is", max_tokens=5, temperature=0,
                                        stream=True, stream_options={"include_usage": True}))
    assert "".join(c.choices[0].text for c in chunks if c.choices) == r.choices[0].text
    assert chunks[-1].usage.completion_tokens == 5 and chunks[-2].choices[0].finish_reason == "length"
    gemma = oa.completions.create(model="gemma-3-270m", prompt="1, 2, 3,", max_tokens=4, temperature=0)
    assert gemma.usage.completion_tokens <= 4 and gemma.choices[0].text
    with pytest.raises(openai.BadRequestError) as err:   # no chat template: chat is refused, naming the model
        oa.chat.completions.create(model="gemma-3-270m", messages=ASK)
    assert err.value.body["param"] == "model" and "/v1/completions" in err.value.body["message"]


def test_a_job_and_its_checkpoint_answer_with_their_own_adapters(world, trained):
    oa = world.oa(world.alice)
    ask = [{"role": "user", "content": "What is 7 plus 7?"}]

    def loads(model: str, times: int) -> list[str]:
        """The worker's count of adapters loaded after each request on `model` (waits for `times` log lines)."""
        deadline = time.monotonic() + 30
        pattern = re.escape(f" on {model}: ") + r".*loaded (\d+) so far"
        while len(found := re.findall(pattern, world.inference.text())) < times:
            assert time.monotonic() < deadline
            time.sleep(0.1)
        return found

    answers = {m: chat_text(oa, m, messages=ask, temperature=0, max_tokens=10)
               for m in (SMOL, trained.ft, trained.ckpts[0])}
    assert len(set(answers.values())) == 3, answers
    again = chat_text(oa, trained.ft, messages=ask, temperature=0, max_tokens=10)
    assert again == answers[trained.ft]   # the adapter cache serves it again, the same, without reloading it
    assert loads(trained.ft, 2)[-1] == loads(trained.ckpts[0], 1)[-1]
    ids = [m.id for m in oa.models.list()]
    assert SMOL in ids and trained.ft in ids and set(trained.ckpts) <= set(ids)
    got = oa.models.retrieve(trained.ckpts[0])
    assert got.owned_by == world.alice.name and got.model_extra["job_id"] == trained.job_id
    # the CPU default engine ("auto"): llama.cpp on the catalog's base GGUF, loaded once
    loaded = r"loaded base SmolLM2-135M-Instruct \(llama\.cpp, \S+\.gguf, \d+ threads, \d+ sequences of \d+ tokens\)"
    assert len(re.findall(loaded, world.inference.text())) == 1


def test_not_found_for_another_owners_a_deleted_and_a_misspelt_model(world, trained):
    alice, bob = world.oa(world.alice), world.oa(world.bob)
    for model, client in ((trained.ft, bob), (trained.ft + "x", alice), ("SmolLM2-135M-Instruc", alice),
                          (trained.ckpts[0].replace("ckpt-step-", "ckpt-step-9"), alice)):
        with pytest.raises(openai.NotFoundError) as err:
            client.chat.completions.create(model=model, messages=ASK, max_tokens=2)
        assert err.value.code == "model_not_found" and err.value.body["param"] == "model", model
        with pytest.raises(openai.NotFoundError):
            client.models.retrieve(model)
    assert trained.ft not in [m.id for m in bob.models.list()]
    with pytest.raises(openai.NotFoundError):
        bob.models.delete(trained.ft)
    last = trained.ckpts[-1]
    deleted = alice.models.delete(last)
    assert deleted.id == last and deleted.deleted is True
    for call in (lambda: alice.chat.completions.create(model=last, messages=ASK, max_tokens=2),
                 lambda: alice.completions.create(model=last, prompt="x", max_tokens=2),
                 lambda: alice.models.retrieve(last), lambda: alice.models.delete(last)):
        with pytest.raises(openai.NotFoundError):
            call()
    assert last not in [m.id for m in alice.models.list()]
    with pytest.raises(openai.BadRequestError):
        alice.models.delete(SMOL)


UNSUPPORTED = [("tools", [{"type": "function", "function": {"name": "f", "parameters": {}}}]),
               ("tool_choice", "auto"), ("response_format", {"type": "json_object"}),
               ("audio", {"voice": "alloy", "format": "wav"}),
               ("modalities", ["text", "audio"]),
               ("logit_bias", {"1": 5}), ("reasoning_effort", "low")]


@pytest.mark.parametrize(("name", "value"), UNSUPPORTED, ids=[n for n, _ in UNSUPPORTED])
def test_unsupported_parameters_are_a_400_naming_them(world, name, value):
    with pytest.raises(openai.BadRequestError) as err:
        world.oa(world.alice).chat.completions.create(model=SMOL, messages=ASK, max_tokens=2, **{name: value})
    assert err.value.body["param"] == name, err.value.body


def test_bounds_and_unknown_parameters(world):
    oa = world.oa(world.alice)
    cases = [(dict(max_completion_tokens=65), "max_completion_tokens"), (dict(extra_body={"best_of": 3}), "best_of"),
             (dict(extra_body={"echo": True}), "echo"), (dict(extra_body={"colour": "red"}), "colour"),
             (dict(max_tokens=4, max_completion_tokens=5), "max_tokens"), (dict(stop=["a"] * 5), "stop"),
             (dict(temperature=3), "temperature")]
    for kw, param in cases:
        with pytest.raises(openai.BadRequestError) as err:
            oa.chat.completions.create(model=SMOL, messages=ASK, **kw)
        assert err.value.body["param"] == param, (kw, err.value.body)
    long = [{"role": "user", "content": "word " * 9000}]
    with pytest.raises(openai.BadRequestError) as err:   # the worker counts the prompt with the model's tokenizer
        oa.chat.completions.create(model=SMOL, messages=long, max_tokens=4)
    assert err.value.code == "context_length_exceeded" and err.value.body["param"] == "messages"
    with pytest.raises(openai.BadRequestError) as err:
        oa.completions.create(model=SMOL, prompt="x", max_tokens=2, suffix="y")
    assert err.value.body["param"] == "suffix"


def test_an_error_mid_stream_raises_in_the_client(world):
    """A worker failure after the answer began reaches the client as an `error` event (injected here
    into the live stream of the request, as the worker writes one when generation fails)."""
    r = redis.Redis.from_url(REDIS_URL)
    prefix = world.settings.broker_transport_options["global_keyprefix"]
    stream = world.oa(world.alice).chat.completions.create(model=SMOL, messages=ASK, temperature=0, max_tokens=60,
                                                           stream=True)
    first = next(iter(stream))
    assert first.choices[0].delta.role == "assistant"
    keys = list(r.scan_iter(match=f"{prefix}lcsb:gen:*:out"))
    assert keys
    for key in keys:   # this test's request is the only one in flight
        r.xadd(key, {"r": '{"t": "error", "status": 500, "code": "generation_failed", "message": "boom"}'})
    with pytest.raises(openai.APIError, match="boom"):
        for _ in stream:
            pass


def test_a_client_that_goes_away_stops_the_worker(world):
    headers = {"Authorization": f"Bearer {world.alice.key}"}
    body = {"model": SMOL, "messages": [{"role": "user", "content": "Tell me a long story about a dragon."}],
            "max_tokens": 64, "temperature": 0, "stream": True}
    before = len(re.findall(r"cancelled after (\d+) tokens", world.inference.text()))
    with httpx.Client(timeout=120) as client, client.stream("POST", f"{world.url}/v1/chat/completions", json=body,
                                                            headers=headers) as resp:
        assert resp.status_code == 200
        got = 0
        for line in resp.iter_lines():
            got += line.startswith("data:")
            if got >= 3:   # the role chunk and two deltas, then the client goes away
                break
    deadline = time.monotonic() + 60
    while len(m := re.findall(r"cancelled after (\d+) tokens", world.inference.text())) <= before:
        assert time.monotonic() < deadline, world.inference.text()[-2000:]
        time.sleep(0.2)
    assert int(m[-1]) < 20   # of 64: stopped within a few tokens of the client going away


def test_past_the_queue_limit_a_fast_503(world, smol):
    from fastapi.testclient import TestClient

    from api.main import create_app

    app = create_app(world.settings.model_copy(update={"inference_max_pending": 0}))
    with TestClient(app) as client:
        t0 = time.monotonic()
        r = client.post("/v1/chat/completions", json={"model": SMOL, "messages": ASK},
                        headers={"Authorization": f"Bearer {world.alice.key}"})
        assert r.status_code == 503 and r.json()["error"]["code"] == "server_overloaded"
        assert r.headers["Retry-After"] == "1" and time.monotonic() - t0 < 5
    app.state.db.dispose()


def test_the_api_imports_no_torch(world):
    maps = open(f"/proc/{world.api_pid}/maps").read()
    assert "libtorch" not in maps and "torch/lib" not in maps


def test_lcsb_chat_streams_plain_lines_when_piped(world):
    import os
    import subprocess
    import sys

    from tests.serving.conftest import ROOT

    env = {**os.environ, "LCSB_BASE_URL": f"{world.url}/v1", "LCSB_API_KEY": world.alice.key}
    run = subprocess.run([sys.executable, "-m", "lcsb_client.main", "chat", SMOL, "--message", ASK[0]["content"],
                          "--temperature", "0", "--max-tokens", "8"], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=180)
    assert run.returncode == 0, run.stderr
    expected = chat_text(world.oa(world.alice), SMOL, temperature=0, max_completion_tokens=8)
    assert run.stdout == expected.replace("\n", " ") + "\n"
    # an answer cut at the limit says so on stderr (stdout stays the answer)
    reason = world.oa(world.alice).chat.completions.create(model=SMOL, messages=ASK, temperature=0,
                                                             max_completion_tokens=8).choices[0].finish_reason
    assert ("[cut: the answer reached --max-tokens 8]" in run.stderr) == (reason == "length")
    piped = subprocess.run([sys.executable, "-m", "lcsb_client.main", "chat", SMOL, "--temperature", "0",
                            "--max-tokens", "4"], cwd=ROOT, env=env, input="Hi\n\nWhat is 3+3?\n",
                           capture_output=True, text=True, timeout=180)
    assert piped.returncode == 0 and len(piped.stdout.splitlines()) == 2 and "you>" not in piped.stdout + piped.stderr
    assert "[cut: the answer reached --max-tokens 4]" in piped.stderr  # "Hi" gets a greeting of more than 4 tokens
    missing = subprocess.run([sys.executable, "-m", "lcsb_client.main", "chat", "ft:nope", "-m", "hi"], cwd=ROOT,
                             env=env, capture_output=True, text=True, timeout=60)
    assert missing.returncode == 2 and "model_not_found" in missing.stderr


def test_the_inference_worker_caps_its_own_memory(world):
    pid = world.inference.proc.pid
    assert re.search(r"LCSB worker ready: inference queue inference-\w+, process memory 4096 MiB by ",
                     world.inference.text())
    cgroup = open(f"/proc/{pid}/cgroup").read()
    limits = open(f"/proc/{pid}/limits").read()
    address_space = next(line for line in limits.splitlines() if line.startswith("Max address space"))
    assert f"lcsb-{pid}-inference" in cgroup or "unlimited" not in address_space, (cgroup, address_space)
