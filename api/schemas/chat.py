"""Request bodies of `/v1/chat/completions` and `/v1/completions` (OpenAI's shape).

Supported: roles `system`, `developer` (served as system), `user`, `assistant`; content as a string
or a list of text parts; `temperature`, `top_p`, `frequency_penalty` and `presence_penalty` (-2 to 2,
OpenAI's semantics), `max_completion_tokens` / `max_tokens`, `stop`, `seed` (0 to `SEED_MAX`), `n` (1 to
`MAX_N` choices, each a sequence of the worker's batch; choice i samples with seed + i), `logprobs`
(chat: true/false with `top_logprobs` 0 to 20; completions: 0 to 5 alternatives), computed from the
engine's logits before the penalties, `stream`, `stream_options.include_usage` (with `stream: true`
only), `user`, `metadata`. Any other OpenAI parameter we cannot honour (`tools`, `response_format`
other than text, audio, ...) is a 400 `unsupported_parameter` naming it (`refuse_unsupported`); values
that change nothing (`response_format: {"type": "text"}`, `store: false`, `best_of: 1`) are accepted.
An unknown key is a 400 `unknown_parameter`; a value out of range (`seed: -1`, `n: 0`, `n: 9`,
`top_logprobs: 21`), `top_logprobs` above 0 without `logprobs: true`, and `stream_options` without
`stream: true` (OpenAI's rule and words) are a 400 `invalid_value` naming it.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from lcsb_service.chat import MAX_N, MAX_STOP, MAX_TOP_LOGPROBS
from lcsb_service.errors import InvalidRequest

# OpenAI parameters this service cannot honour, each with the values that change nothing
_HARMLESS: dict[str, tuple[Any, ...]] = {
    "tools": (None, []), "tool_choice": (None, "none"), "parallel_tool_calls": (None,), "functions": (None, []),
    "function_call": (None, "none"), "response_format": (None, {"type": "text"}),
    "top_logprobs": (None, 0),   # completions' (chat declares it): its legacy `logprobs` says how many
    "audio": (None,), "modalities": (None, ["text"]), "prediction": (None,),
    "logit_bias": (None, {}),
    "reasoning_effort": (None,), "web_search_options": (None,), "service_tier": (None, "auto", "default"),
    "store": (None, False), "verbosity": (None,), "prompt_cache_key": (None,), "safety_identifier": (None,),
    "suffix": (None, ""), "echo": (None, False), "best_of": (None, 1),
}
# The largest seed honoured as itself: llama.cpp's sampler takes a 32-bit seed and reads 2**32 - 1
# (LLAMA_DEFAULT_SEED) as "draw a random one", so -1 or 2**32 + 7 would not be the seed they say.
SEED_MAX = 2**32 - 2
STREAM_OPTIONS_WITHOUT_STREAM = "The 'stream_options' parameter is only allowed when 'stream' is enabled."
MAX_LEGACY_LOGPROBS = 5   # /v1/completions' `logprobs` (OpenAI's bound)


def refuse_unsupported(body: _Sampling) -> None:
    """400 for the first parameter of `body` that this service cannot honour, before anything reaches
    a worker.

    Raises:
        InvalidRequest: `unsupported_parameter` naming an OpenAI parameter we do not support,
            `unknown_parameter` for a key OpenAI does not have either, `invalid_value` naming
            `stream_options` when it is given without `stream: true`, or `top_logprobs` above 0 without
            `logprobs: true`.
    """
    if isinstance(body, ChatCompletionRequest) and body.top_logprobs and not body.logprobs:
        raise InvalidRequest(f"top_logprobs: {body.top_logprobs} alternatives need logprobs: true (OpenAI's rule); "
                             "send logprobs: true, or leave top_logprobs out", code="invalid_value",
                             param="top_logprobs")
    if body.stream_options is not None and not body.stream:
        raise InvalidRequest(f"{STREAM_OPTIONS_WITHOUT_STREAM} Send stream: true, or leave stream_options out",
                             code="invalid_value", param="stream_options")
    for name, value in (body.model_extra or {}).items():
        if name not in _HARMLESS:
            raise InvalidRequest(f"{name}: unknown parameter", code="unknown_parameter", param=name)
        if value not in _HARMLESS[name]:
            raise InvalidRequest(f"{name}: not supported by this service (its models answer with text only, no "
                                 "tools, logit bias or audio); leave it out",
                                 code="unsupported_parameter", param=name)


class TextPart(BaseModel):
    """A content part: text only (images, audio and files are refused)."""

    model_config = ConfigDict(extra="forbid")
    type: Literal["text"]
    text: str


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="forbid")
    role: Literal["system", "developer", "user", "assistant"]
    content: str | list[TextPart]
    name: str | None = Field(default=None, max_length=64)

    def text(self) -> str:
        """The content as one string (text parts joined without separators, as OpenAI renders them)."""
        return self.content if isinstance(self.content, str) else "".join(p.text for p in self.content)


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")
    include_usage: bool = False


class _Sampling(BaseModel):
    """What both routes take. Unknown keys land in `model_extra` and are refused by `refuse_unsupported`."""

    model_config = ConfigDict(extra="allow")
    model: str = Field(min_length=1, max_length=400)
    temperature: float | None = Field(default=None, ge=0, le=2)
    top_p: float | None = Field(default=None, gt=0, le=1)
    frequency_penalty: float | None = Field(
        default=None, ge=-2, le=2, description="OpenAI's: logit -= frequency_penalty x times the token was generated")
    presence_penalty: float | None = Field(
        default=None, ge=-2, le=2, description="OpenAI's: logit -= presence_penalty if the token was generated")
    max_tokens: int | None = Field(default=None, ge=1)
    stop: str | list[str] | None = None
    seed: int | None = Field(default=None, ge=0, le=SEED_MAX,
                             description="0 to 2**32 - 2: each its own draws (a 32-bit sampler seed)")
    n: int | None = Field(default=None, ge=1, le=MAX_N,
                          description=f"choices, 1 to {MAX_N}: sequences of the batch, choice i seeded seed + i")
    stream: bool | None = False
    stream_options: StreamOptions | None = None
    user: str | None = Field(default=None, max_length=256)
    metadata: dict[str, str] | None = None

    @field_validator("stop")
    @classmethod
    def _stops(cls, v: str | list[str] | None) -> str | list[str] | None:
        items = [v] if isinstance(v, str) else v or []
        if len(items) > MAX_STOP or any(not s for s in items):
            raise ValueError(f"at most {MAX_STOP} non-empty stop sequences")
        return v

    def stop_list(self) -> list[str]:
        return [self.stop] if isinstance(self.stop, str) else list(self.stop or [])


class ChatCompletionRequest(_Sampling):
    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    logprobs: bool | None = Field(default=None, description="each answer token's log probability (OpenAI's shape)")
    top_logprobs: int | None = Field(default=None, ge=0, le=MAX_TOP_LOGPROBS,
                                     description="with logprobs: the most likely tokens at each position, 0 to 20")

    def logprob_count(self) -> int | None:
        """Alternatives per token for the worker (None: no log probabilities)."""
        return (self.top_logprobs or 0) if self.logprobs else None


class CompletionRequest(_Sampling):
    prompt: str | list[str] = Field(description="one prompt (a list of one string is accepted)")
    logprobs: int | None = Field(default=None, ge=0, le=MAX_LEGACY_LOGPROBS,
                                 description="the legacy shape: the sampled token's log probability and this many "
                                             "most likely alternatives, 0 to 5")

    def logprob_count(self) -> int | None:
        """Alternatives per token for the worker (None: no log probabilities)."""
        return self.logprobs

    @field_validator("prompt")
    @classmethod
    def _one_prompt(cls, v: str | list[str]) -> str | list[str]:
        if isinstance(v, list) and len(v) != 1:
            raise ValueError("one prompt per request (a list of exactly one string)")
        return v

    def prompt_text(self) -> str:
        return self.prompt if isinstance(self.prompt, str) else self.prompt[0]
