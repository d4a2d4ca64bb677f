"""The inference worker's answer of several choices and log probabilities (`worker.inference.choices`,
issue 49): the transformers fallback gives no log probabilities, so a request for them is a 400
`unsupported_parameter` naming the parameter (never numbers it does not have); the llama.cpp engine
takes them."""

from __future__ import annotations

import pytest

from lcsb_service.chat import GenerationRequest
from worker.inference.choices import unsupported


def request(**kw) -> GenerationRequest:
    body = {"messages": [{"role": "user", "content": "Hi"}]} if "prompt" not in kw else {}
    return GenerationRequest(id="gen-1", owner_id="o", model="m", max_new_tokens=4, **body, **kw)


@pytest.mark.parametrize(("kw", "param"), [({"logprobs": 0}, "logprobs"), ({"logprobs": 3}, "top_logprobs"),
                                           ({"prompt": "x", "logprobs": 2}, "logprobs")])
def test_the_transformers_engine_refuses_log_probabilities_by_name(kw, param):
    record = unsupported(request(**kw), object())   # any engine but llama.cpp's
    assert record is not None and record["status"] == 400 and record["code"] == "unsupported_parameter"
    assert record["param"] == param and "log probabilities" in record["message"]


def test_what_every_engine_answers_is_not_refused():
    from lcsb_core.inference.llama_engine import LlamaEngine

    assert unsupported(request(n=3), object()) is None
    assert unsupported(request(logprobs=5), LlamaEngine.__new__(LlamaEngine)) is None


def test_n_is_bounded_in_the_payload_too():
    from pydantic import ValidationError

    with pytest.raises(ValidationError):
        request(n=9)
    with pytest.raises(ValidationError):
        request(logprobs=21)
