"""A chat or completions request as an inference worker receives it (torch-free): the API validates
the HTTP body (`api.schemas.chat`), writes this payload to the request's stream
(`lcsb_service.streams`) and sends `TaskName.GENERATE(request_id)`; the worker reads it back,
validates it again (`GenerationRequest.model_validate_json`) and resolves `model` again for
`owner_id` (`lcsb_service.served_models.resolve`: a model deleted meanwhile is a 404 there too).

    payload = GenerationRequest(id=rid, owner_id=owner.id, model="ft:...", messages=[...], max_new_tokens=64)
    streams.put_request(rid, payload.model_dump_json())
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

MAX_STOP = 4   # stop sequences per request (OpenAI's limit)
MAX_N = 8      # choices per request (each one sequence of the worker's batch)
MAX_TOP_LOGPROBS = 20   # alternatives per token (OpenAI's chat bound; legacy completions: 5)


class Message(BaseModel):
    """One chat message as the chat template receives it (`developer` is already `system`, content
    parts already joined)."""

    model_config = ConfigDict(extra="forbid")
    role: Literal["system", "user", "assistant"]
    content: str


class GenerationRequest(BaseModel):
    """One request: exactly one of `messages` (chat, rendered with the model's chat template) and
    `prompt` (completions, tokenized as is). `temperature` 0 is greedy decoding; `seed` fixes the
    sampling (None: a fresh one); `stop` strings end the answer and are not part of it; `frequency_penalty`
    and `presence_penalty` as OpenAI defines them (`lcsb_core.inference.SamplingParams`); `n` choices
    (choice i seeded `seed + i`); `logprobs`: None for none, else the log probability of each token
    and of its `logprobs` most likely alternatives."""

    model_config = ConfigDict(extra="forbid")
    id: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9-]+$")
    owner_id: str = Field(min_length=1, max_length=64)
    model: str = Field(min_length=1, max_length=400)
    messages: list[Message] | None = None
    prompt: str | None = None
    max_new_tokens: int = Field(ge=1)
    max_tokens_param: str = "max_tokens"   # the request field that set `max_new_tokens` (named in errors)
    clamp_to_context: bool = False   # no bound was given: end where the context ends, if before `max_new_tokens`
    temperature: float = Field(default=1.0, ge=0, le=2)
    top_p: float = Field(default=1.0, gt=0, le=1)
    seed: int | None = None
    stop: list[str] = Field(default_factory=list, max_length=MAX_STOP)
    frequency_penalty: float = Field(default=0.0, ge=-2, le=2)
    presence_penalty: float = Field(default=0.0, ge=-2, le=2)
    n: int = Field(default=1, ge=1, le=MAX_N)
    logprobs: int | None = Field(default=None, ge=0, le=MAX_TOP_LOGPROBS)

    @model_validator(mode="after")
    def _one_input(self) -> GenerationRequest:
        if (self.messages is None) == (self.prompt is None):
            raise ValueError("a generation request has exactly one of messages and prompt")
        if any(not s for s in self.stop):
            raise ValueError("stop sequences must not be empty")
        return self

    @property
    def kind(self) -> str:
        """"chat" or "completion"."""
        return "chat" if self.messages is not None else "completion"
