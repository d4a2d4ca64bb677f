"""Request bodies of `/v1/chat/completions` and `/v1/completions` (OpenAI's shape).

Supported: roles `system`, `developer` (served as system), `user`, `assistant`; content as a string
or a list of text parts; `temperature`, `top_p`, `frequency_penalty` and `presence_penalty` (-2 to 2,
OpenAI's semantics), `max_completion_tokens` / `max_tokens`, `stop`, `seed`, `n` = 1, `stream`,
`stream_options.include_usage`, `user`, `metadata`. Any other OpenAI parameter we cannot honour
(`tools`, `response_format` other than text, `logprobs`, `n` > 1, audio, ...) is a 400
`unsupported_parameter` naming it (`refuse_unsupported`); values that change nothing (`logprobs: false`,
`response_format: {"type": "text"}`, `store: false`) are accepted. An unknown key is a 400
`unknown_parameter`.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from lcsb_service.chat import MAX_STOP
from lcsb_service.errors import InvalidRequest

# OpenAI parameters this service cannot honour, each with the values that change nothing
_HARMLESS: dict[str, tuple[Any, ...]] = {
    "tools": (None, []), "tool_choice": (None, "none"), "parallel_tool_calls": (None,), "functions": (None, []),
    "function_call": (None, "none"), "response_format": (None, {"type": "text"}), "logprobs": (None, False, 0),
    "top_logprobs": (None, 0), "audio": (None,), "modalities": (None, ["text"]), "prediction": (None,),
    "logit_bias": (None, {}),
    "reasoning_effort": (None,), "web_search_options": (None,), "service_tier": (None, "auto", "default"),
    "store": (None, False), "verbosity": (None,), "prompt_cache_key": (None,), "safety_identifier": (None,),
    "suffix": (None, ""), "echo": (None, False), "best_of": (None, 1),
}


def refuse_unsupported(body: BaseModel) -> None:
    """400 for the first parameter of `body` (its extra keys) that this service cannot honour.

    Raises:
        InvalidRequest: `unsupported_parameter` naming an OpenAI parameter we do not support, or
            `unknown_parameter` for a key OpenAI does not have either.
    """
    for name, value in (body.model_extra or {}).items():
        if name not in _HARMLESS:
            raise InvalidRequest(f"{name}: unknown parameter", code="unknown_parameter", param=name)
        if value not in _HARMLESS[name]:
            raise InvalidRequest(f"{name}: not supported by this service (its models answer with text only, one "
                                 "choice, no tools, log probabilities or penalties); leave it out",
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
    seed: int | None = None
    n: int | None = Field(default=None, ge=1, le=1, description="1 only: one choice per request")
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


class CompletionRequest(_Sampling):
    prompt: str | list[str] = Field(description="one prompt (a list of one string is accepted)")

    @field_validator("prompt")
    @classmethod
    def _one_prompt(cls, v: str | list[str]) -> str | list[str]:
        if isinstance(v, list) and len(v) != 1:
            raise ValueError("one prompt per request (a list of exactly one string)")
        return v

    def prompt_text(self) -> str:
        return self.prompt if isinstance(self.prompt, str) else self.prompt[0]
