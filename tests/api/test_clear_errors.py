"""Issues 48 (item 5) and 49 (item 3): the chat routes' edge cases answer as OpenAI does, at the API,
before a worker is asked: an empty `prompt` on a model whose tokenizer makes no token of it is a 400
`invalid_value` naming `prompt` (streamed too: never a 200 then an error event), `n` outside 1..8 and
`top_logprobs` outside 0..20 (or above 0 without `logprobs: true`) a 400 `invalid_value`,
`stream_options` without `stream: true` a 400 `invalid_value` (OpenAI's words),
a `seed` outside 0..2**32 - 2 a 400 `invalid_value` naming `seed`. What passes these checks is sent to a
worker: here none runs, so it is the 503 `inference_start_timeout` of a short start timeout."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from api.main import create_app
from api.routes.chat import empty_prompt_has_tokens
from api.schemas.chat import SEED_MAX
from lcsb_core.models.gguf_import import model_cache_dir
from lcsb_service.enqueue import RecordingEnqueuer
from tests.api.helpers import SMOL, SMOL_CONFIG, assert_error

BOS_BASE = "Bos-Base"   # a base whose tokenizer starts every text with <bos>, as Gemma-3-270M's does
ASK = [{"role": "user", "content": "Hi"}]
BOS_TOKENIZER = {"post_processor": {
    "type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<bos>", "type_id": 0}},
                                             {"Sequence": {"id": "A", "type_id": 0}}],
    "pair": [], "special_tokens": {"<bos>": {"id": "<bos>", "ids": [2], "tokens": ["<bos>"]}}}}


@pytest.fixture(scope="module")
def quick(settings, tmp_path_factory) -> Iterator[TestClient]:
    """The app with a 0.3 s start timeout (no worker runs: whatever reaches the queue is a quick 503)
    and one more base, `BOS_BASE`."""
    extra = tmp_path_factory.mktemp("bos-models")
    folder = extra / BOS_BASE
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(SMOL_CONFIG))
    (folder / "tokenizer.json").write_text(json.dumps(BOS_TOKENIZER))
    (folder / "model.safetensors").write_bytes(b"\0" * 1024)
    app = create_app(settings.model_copy(update={"inference_start_timeout_s": 0.3,
                                                 "model_dirs": [*settings.model_dirs, extra]}),
                     enqueuer=RecordingEnqueuer())
    with TestClient(app) as client:
        yield client
    app.state.db.dispose()


def _post(client: TestClient, alice, route: str, **fields) -> object:
    body = {"model": SMOL, **({"messages": ASK} if route == "chat" else {"prompt": "1, 2,"}), **fields}
    return client.post("/v1/chat/completions" if route == "chat" else "/v1/completions", headers=alice.headers,
                       json=body)


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("prompt", ["", [""]])
def test_an_empty_prompt_without_tokens_is_a_400_naming_prompt(quick, alice, prompt, stream):
    r = quick.post("/v1/completions", headers=alice.headers,
                   json={"model": SMOL, "prompt": prompt, "max_tokens": 2, "stream": stream})
    err = assert_error(r, 400, "invalid_value", "prompt")
    assert err["type"] == "invalid_request_error" and "no token" in err["message"]


def test_an_empty_prompt_is_sent_where_the_tokenizer_adds_a_bos(quick, alice):
    r = quick.post("/v1/completions", headers=alice.headers, json={"model": BOS_BASE, "prompt": "", "max_tokens": 2})
    assert_error(r, 503, "inference_start_timeout")   # past the checks: queued for a worker


@pytest.mark.parametrize("route", ["chat", "completions"])
@pytest.mark.parametrize(("fields", "param", "code"), [
    ({"n": 9}, "n", "invalid_value"), ({"n": 128}, "n", "invalid_value"), ({"n": 0}, "n", "invalid_value"),
    ({"stream_options": {"include_usage": True}}, "stream_options", "invalid_value"),
    ({"stream": False, "stream_options": {"include_usage": False}}, "stream_options", "invalid_value"),
    ({"seed": -1}, "seed", "invalid_value"), ({"seed": 2**32 - 1}, "seed", "invalid_value"),
    ({"seed": 2**32 + 7}, "seed", "invalid_value"), ({"seed": 2**63}, "seed", "invalid_value")],
    ids=["n9", "n128", "n0", "options-no-stream", "options-stream-false", "seed-1", "seed-2^32-1", "seed-2^32+7",
         "seed-2^63"])
def test_edge_cases_are_a_400_naming_the_parameter(quick, alice, route, fields, param, code):
    err = assert_error(_post(quick, alice, route, **fields), 400, code, param)
    if param == "stream_options":
        assert err["message"].startswith("The 'stream_options' parameter is only allowed when 'stream' is enabled.")


@pytest.mark.parametrize(("route", "fields", "param"), [
    ("chat", {"top_logprobs": 21, "logprobs": True}, "top_logprobs"), ("chat", {"top_logprobs": -1}, "top_logprobs"),
    ("chat", {"top_logprobs": 3}, "top_logprobs"), ("chat", {"logprobs": False, "top_logprobs": 1}, "top_logprobs"),
    ("completions", {"logprobs": 6}, "logprobs"), ("completions", {"logprobs": -1}, "logprobs")],
    ids=["top21", "top-1", "top-without-logprobs", "top-logprobs-false", "legacy6", "legacy-1"])
def test_log_probabilities_out_of_bounds_are_a_400_naming_them(quick, alice, route, fields, param):
    assert_error(_post(quick, alice, route, **fields), 400, "invalid_value", param)


@pytest.mark.parametrize("route", ["chat", "completions"])
@pytest.mark.parametrize("fields", [{"seed": 0}, {"seed": SEED_MAX}, {"n": 1}, {"n": 2}, {"n": 8},
                                    {"stream_options": None},
                                    {"stream": True, "stream_options": {"include_usage": True}}],
                         ids=["seed0", "seed-max", "n1", "n2", "n8", "options-null", "options-stream"])
def test_what_can_be_honoured_is_sent_to_a_worker(quick, alice, route, fields):
    assert_error(_post(quick, alice, route, max_tokens=2, **fields), 503, "inference_start_timeout")


@pytest.mark.parametrize("name", ["SmolLM2-135M-Instruct", "gemma-3-270m"])
def test_the_api_reads_an_empty_prompt_as_the_worker_tokenizes_it(name):
    """The API's reading of the tokenizer files agrees with `Prompting.text_prompt` (the tokenizer
    itself) on the shipped bases: SmolLM2 makes no token of "", Gemma-3-270M its <bos>."""
    folder = Path(model_cache_dir()) / name
    if not (folder / "tokenizer.json").is_file():
        pytest.skip(f"{name} is not in the model cache")
    from transformers import AutoTokenizer

    ids = AutoTokenizer.from_pretrained(folder)("")["input_ids"]
    assert empty_prompt_has_tokens(folder) == bool(ids) and bool(ids) == (name == "gemma-3-270m")


def test_the_openai_client_gets_a_bad_request_it_does_not_retry(live_server, alice):
    """Through the official client (its default retries on): each edge case is `BadRequestError`
    (a 400 is never retried), streamed ones too, at `create` and before any chunk."""
    import openai

    oa = openai.OpenAI(base_url=f"{live_server.url}/v1", api_key=alice.key, timeout=30)
    calls = [("n", lambda: oa.chat.completions.create(model=SMOL, messages=ASK, n=9)),
             ("top_logprobs", lambda: oa.chat.completions.create(model=SMOL, messages=ASK, logprobs=True,
                                                                 top_logprobs=21)),
             ("prompt", lambda: oa.completions.create(model=SMOL, prompt="", max_tokens=2)),
             ("prompt", lambda: oa.completions.create(model=SMOL, prompt="", max_tokens=2, stream=True)),
             ("stream_options", lambda: oa.chat.completions.create(model=SMOL, messages=ASK,
                                                                   stream_options={"include_usage": True})),
             ("seed", lambda: oa.chat.completions.create(model=SMOL, messages=ASK, seed=-1)),
             ("seed", lambda: oa.completions.create(model=SMOL, prompt="x", seed=4294967303))]
    for param, call in calls:
        with pytest.raises(openai.BadRequestError) as err:
            call()
        assert err.value.body["param"] == param, err.value.body
        assert err.value.body["code"] == "invalid_value"
