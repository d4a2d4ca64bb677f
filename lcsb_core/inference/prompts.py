"""What both engines share to turn a request into prompt tokens and an answer's end, torch-free
(one source): the chat template choice and prompt rendering (`Prompting`), the end tokens (`end_tokens`),
stop strings cut from the text (OpenAI's rule: the stop sequence is not returned; text is held back while
it could still be the start of one) and the finish reason."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from lcsb_core.chat_tokens import encode_chat

CHAT_END_TOKENS = ("<end_of_turn>", "<|im_end|>", "<|eot_id|>", "<|end|>")


def finish_reason(stopped_by_string: bool, tokens: list[int], end_ids: frozenset[int], max_new_tokens: int) -> str:
    """"stop" (a stop string, or the last token is an end token), "length" (`max_new_tokens` made),
    else "cancelled"."""
    if stopped_by_string or (tokens and tokens[-1] in end_ids):
        return "stop"
    return "length" if len(tokens) >= max_new_tokens else "cancelled"


def cut_stops(pieces: Iterator[str], stops: tuple[str, ...], on_stop: Callable[[], object]) -> Iterator[str]:
    """The text of `pieces` up to the first of `stops` (not included; OpenAI's rule), text held back
    while it could still be the start of one; `on_stop` is called when one is found (then no more is
    read from `pieces`)."""
    held = ""
    for piece in pieces:
        held += piece
        cut = first_stop(held, stops)
        if cut is not None:
            on_stop()
            if held[:cut]:
                yield held[:cut]
            return
        keep = stop_prefix_len(held, stops)
        if len(held) > keep:
            yield held[:len(held) - keep]
            held = held[len(held) - keep:]
    if held:
        yield held


def first_stop(text: str, stops: tuple[str, ...]) -> int | None:
    """Where the first of `stops` starts in `text` (characters), None when none is in it."""
    hits = [i for s in stops if (i := text.find(s)) >= 0]
    return min(hits) if hits else None


def stop_prefix_len(text: str, stops: tuple[str, ...]) -> int:
    """The longest end of `text` that is the start of a stop string (held back until decided)."""
    best = 0
    for s in stops:
        for n in range(min(len(s) - 1, len(text)), best, -1):
            if s.startswith(text[-n:]):
                best = n
                break
    return best


class Prompting:
    """What every engine shares (one source): `tokenizer` (the base folder's, transformers), the chat
    template choice, prompt rendering and the end tokens. Subclasses set `tokenizer` and `end_token_ids`."""

    tokenizer: Any
    end_token_ids: frozenset[int]

    def template_of(self, adapter_dir: Path | None) -> str | None:
        """The chat template to render with: the adapter's `chat_template.jinja`, else the base's (None: none)."""
        own = adapter_dir / "chat_template.jinja" if adapter_dir is not None else None
        if own is not None and own.is_file():
            return own.read_text()
        return getattr(self.tokenizer, "chat_template", None) or None

    def chat_prompt(self, messages: list[dict[str, str]], template: str | None) -> list[int]:
        """Token ids of `messages` rendered with `template` plus the assistant's generation prompt
        (`chat_tokens.encode_chat`: message contents are plain text, so `<|im_end|>` typed by a user never
        becomes a control token; training and graded evaluation tokenize the same way).

        Raises:
            ValueError: no chat template.
        """
        if not template:
            raise ValueError("this model has no chat template; use /v1/completions")
        return encode_chat(self.tokenizer, messages, template, add_generation_prompt=True)

    def text_prompt(self, prompt: str) -> list[int]:
        """Token ids of a completions prompt (with the tokenizer's BOS where it adds one)."""
        return self.tokenizer(prompt)["input_ids"]


def end_tokens(tokenizer: Any, eos: int | list[int] | None) -> frozenset[int]:
    """The ids that end an answer: `eos` (the generation config's), the tokenizer's EOS and the chat end
    markers (`CHAT_END_TOKENS`) the vocabulary has."""
    ids: set[int] = set(eos if isinstance(eos, list) else [eos] if eos is not None else [])
    if tokenizer.eos_token_id is not None:
        ids.add(tokenizer.eos_token_id)
    vocab = tokenizer.get_vocab()
    ids.update(vocab[t] for t in CHAT_END_TOKENS if t in vocab)
    return frozenset(ids)
