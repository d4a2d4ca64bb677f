"""The `Engine` protocol: what the inference worker and graded evaluation ask of a serving engine,
whichever it is (`LlamaEngine`, `InferenceEngine`); torch-free."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Protocol

from lcsb_core.inference.adapters import AdapterRef
from lcsb_core.inference.sampling import SamplingParams


class Engine(Protocol):
    """One base model loaded once and its adapter cache (typing.Protocol, PEP 544).

    `stream` returns an iterable of text pieces that, once exhausted, carries `finish_reason` and
    `completion_tokens`; `chat_prompt` raises ValueError where there is no chat template."""

    tokenizer: Any
    end_token_ids: frozenset[int]

    @property
    def context_length(self) -> int:
        """The longest sequence the model takes (tokens)."""

    def template_of(self, adapter_dir: Path | None) -> str | None:
        """The chat template to render with: the adapter's, else the base's (None: none)."""

    def chat_prompt(self, messages: list[dict[str, str]], template: str | None) -> list[int]:
        """Token ids of `messages` and the assistant's generation prompt."""

    def text_prompt(self, prompt: str) -> list[int]:
        """Token ids of a completions prompt."""

    def stream(self, prompt_ids: list[int], adapter: AdapterRef | None, params: SamplingParams,
               should_stop: Callable[[], bool] = ...) -> Iterator[str] | Any:
        """A generation of `prompt_ids` with `adapter` (None: the base alone)."""
