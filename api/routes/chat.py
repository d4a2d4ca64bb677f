"""`POST /v1/chat/completions` and `POST /v1/completions`: OpenAI's shape, answered by inference
workers (`python -m worker --kind inference`; nothing here imports torch).

`model` is a catalog base name, one of the caller's succeeded jobs' `fine_tuned_model`, or one of
their checkpoints' ids, found by exact lookup (`lcsb_service.served_models.resolve`): anything else,
another owner's or a deleted one is 404 `model_not_found`. Chat on a model without a chat template
(Gemma-3-270M's base, or a model whose job trained on prompt/completion or text data: it learnt the raw
prompt, which `/v1/completions` sends as it is) is a 400 naming the model and pointing to `/v1/completions`
(`served_models.require_chat`, answered here before a worker is asked).

Bounds (400 naming the field): `max_completion_tokens` / `max_tokens` at most
`Settings.inference_max_new_tokens` and below the model's context; the prompt plus them within the
context (checked by the worker with the model's tokenizer, before the answer starts). Without a
bound, chat answers up to `inference_max_new_tokens` tokens (less where the context ends first);
completions 16 (OpenAI's default).

An empty `prompt` is served where the model's tokenizer starts every text with a special token
(Gemma-3-270M's `<bos>`: the answer is the model's first words of a document, as OpenAI's legacy
completions do without a prompt); where it gives no token at all (SmolLM2) there is nothing to
generate from, and it is a 400 `invalid_value` naming `prompt`, answered here, before a worker is asked.
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import Any

import anyio
from fastapi import APIRouter, Request

from api.deps import OwnerDep
from api.generation import answer
from api.schemas.chat import ChatCompletionRequest, CompletionRequest, refuse_unsupported
from api.schemas.common import errors
from lcsb_service.chat import GenerationRequest, Message
from lcsb_service.errors import InvalidRequest
from lcsb_service.ids import new_id
from lcsb_service.served_models import ServedModel, require_chat, resolve
from lcsb_service.settings import Settings

router = APIRouter(prefix="/v1", tags=["chat"])
COMPLETIONS_DEFAULT_MAX_TOKENS = 16   # OpenAI's default for /v1/completions
_RESPONSES = errors(400, 401, 404, 503)


async def _target(request: Request, owner_id: str, model: str) -> ServedModel:
    app = request.app

    def find() -> ServedModel:
        with app.state.db.read_session() as session:
            return resolve(session, owner_id, model, app.state.settings.resolved_model_dirs)

    return await anyio.to_thread.run_sync(find)


def _max_new_tokens(settings: Settings, target: ServedModel, given: dict[str, int | None],
                    default: int) -> tuple[int, str]:
    """(tokens, the field that set them) from the first field of `given` that is set; 400 past the
    bounds. None given: (`default` capped by the settings, "")."""
    name, value = next(((k, v) for k, v in given.items() if v is not None), (next(iter(given)), None))
    set_both = [k for k, v in given.items() if v is not None]
    if len(set_both) > 1 and len({given[k] for k in set_both}) > 1:
        raise InvalidRequest(f"{set_both[1]}: give {set_both[0]} or {set_both[1]}, not both with different values",
                             param=set_both[1])
    if value is None:
        return min(default, settings.inference_max_new_tokens), ""
    if value > settings.inference_max_new_tokens:
        raise InvalidRequest(f"{name}: at most {settings.inference_max_new_tokens} new tokens per request, "
                             f"found {value}", code="invalid_value", param=name)
    if value >= target.base.context_length:
        raise InvalidRequest(f"{name}: {value} tokens do not fit {target.model_id}'s context of "
                             f"{target.base.context_length} tokens", code="context_length_exceeded", param=name)
    return value, name


@lru_cache(maxsize=16)
def _adds_special_tokens(tokenizer_json: Path, _stamp: tuple[int, int]) -> bool:
    """Whether the tokenizer in `tokenizer_json` adds special tokens (a BOS) to every text, so that an
    empty one is still a prompt (its post-processor's template; `_stamp`, the file's mtime and size,
    keys the cache)."""
    try:
        processor = json.loads(tokenizer_json.read_text()).get("post_processor")
    except (OSError, ValueError, AttributeError):
        return False

    def adds(p: Any) -> bool:
        if not isinstance(p, dict):
            return False
        if p.get("type") == "Sequence":
            return any(adds(q) for q in p.get("processors") or [])
        if p.get("type") == "TemplateProcessing":
            return any(isinstance(part, dict) and "SpecialToken" in part for part in p.get("single") or [])
        return p.get("type") in ("BertProcessing", "RobertaProcessing")

    return adds(processor)


def empty_prompt_has_tokens(base_path: Path) -> bool:
    """Whether the tokenizer of the base at `base_path` turns "" into at least one token (as
    `lcsb_core.inference.Prompting.text_prompt` does where the tokenizer adds a BOS). False unless the
    tokenizer's files say so, and `add_bos_token: false` in `tokenizer_config.json` says no."""
    try:
        if json.loads((base_path / "tokenizer_config.json").read_text()).get("add_bos_token") is False:
            return False
    except (OSError, ValueError, AttributeError):
        pass
    path = base_path / "tokenizer.json"
    try:
        stat = path.stat()
    except OSError:
        return False
    return _adds_special_tokens(path, (stat.st_mtime_ns, stat.st_size))


def _sampling(body: ChatCompletionRequest | CompletionRequest) -> dict[str, Any]:
    given = {"temperature": body.temperature, "top_p": body.top_p, "seed": body.seed,
             "frequency_penalty": body.frequency_penalty, "presence_penalty": body.presence_penalty}
    return {k: v for k, v in given.items() if v is not None} | {"stop": body.stop_list(), "n": body.n or 1,
                                                                 "logprobs": body.logprob_count()}


@router.post("/chat/completions", responses=_RESPONSES)
async def chat_completions(body: ChatCompletionRequest, owner: OwnerDep, request: Request) -> Any:
    """A chat completion (OpenAI `chat.completion`, or `chat.completion.chunk` events with `stream`)."""
    refuse_unsupported(body)
    settings: Settings = request.app.state.settings
    target = await _target(request, owner.id, body.model)
    require_chat(target)
    tokens, field = _max_new_tokens(settings, target, {"max_completion_tokens": body.max_completion_tokens,
                                                       "max_tokens": body.max_tokens},
                                    settings.inference_max_new_tokens)
    messages = [Message(role="system" if m.role == "developer" else m.role, content=m.text()) for m in body.messages]
    payload = GenerationRequest(id=new_id("gen"), owner_id=owner.id, model=body.model, messages=messages,
                                max_new_tokens=tokens, max_tokens_param=field or "max_completion_tokens",
                                clamp_to_context=not field, **_sampling(body))
    return await answer(request.app, payload, stream=bool(body.stream),
                        include_usage=bool(body.stream_options and body.stream_options.include_usage))


@router.post("/completions", responses=_RESPONSES)
async def completions(body: CompletionRequest, owner: OwnerDep, request: Request) -> Any:
    """A text completion of `prompt` (OpenAI `text_completion`), for any model, with or without a chat template."""
    refuse_unsupported(body)
    settings: Settings = request.app.state.settings
    target = await _target(request, owner.id, body.model)
    if not body.prompt_text() and not await anyio.to_thread.run_sync(empty_prompt_has_tokens, target.base.path):
        raise InvalidRequest(f"prompt: empty, and {target.base.name}'s tokenizer makes no token of an empty text, so "
                             "there is nothing to continue; send at least one character", code="invalid_value",
                             param="prompt")
    tokens, field = _max_new_tokens(settings, target, {"max_tokens": body.max_tokens}, COMPLETIONS_DEFAULT_MAX_TOKENS)
    payload = GenerationRequest(id=new_id("gen"), owner_id=owner.id, model=body.model, prompt=body.prompt_text(),
                                max_new_tokens=tokens, max_tokens_param="max_tokens", clamp_to_context=not field,
                                **_sampling(body))
    return await answer(request.app, payload, stream=bool(body.stream),
                        include_usage=bool(body.stream_options and body.stream_options.include_usage))
