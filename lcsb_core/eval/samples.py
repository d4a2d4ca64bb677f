"""Prompts and references of a graded evaluation, read from a chat or prompt/completion JSONL file.
Torch-free (a tokenizer renders chat prompts; any object with `apply_chat_template` will do).

    samples = read_samples("valid.jsonl", n=64)
    prompts = [s.render(tokenizer) for s in samples]     # chat: template + generation prompt (text, to show)
    ids = [s.prompt_ids(tokenizer) for s in samples]     # what the model reads

A chat prompt's ids come from `lcsb_core.chat_tokens.encode_chat`, as serving and training make them: the
messages' contents are plain text (a `<|im_end|>` inside one is not a control token). Tokenizing `render`'s
text would read it as one; use `prompt_ids` to feed a model.

A chat line's prompt is its conversation up to (not including) the last assistant turn, rendered with
the tokenizer's chat template and `add_generation_prompt=True`; its reference is that last assistant
turn. A prompt/completion line's prompt is its prompt, as training sees it; its reference the completion.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from lcsb_core.chat_tokens import encode_chat
from lcsb_core.data.formats import CHAT, PROMPT_COMPLETION, Example, parse_record
from lcsb_core.data.json_lines import RecordError
from lcsb_core.data.limits import ValidationLimits
from lcsb_core.data.reader import LineReader
from lcsb_core.errors import DataError


@dataclass(frozen=True)
class EvalSample:
    """One prompt: `line` (1-based, in its file), `messages` (chat: the turns before the last assistant
    one, as {"role", "content"} dicts) or `prompt` (prompt/completion), and `reference`."""

    line: int
    reference: str
    messages: tuple[dict[str, str], ...] = ()
    prompt: str = ""

    def render(self, tokenizer: Any) -> str:
        """The text the model continues: the chat template with the generation prompt, or the prompt."""
        if not self.messages:
            return self.prompt
        text = tokenizer.apply_chat_template(list(self.messages), tokenize=False, add_generation_prompt=True)
        if not isinstance(text, str):
            raise DataError(f"line {self.line}: the chat template did not render to text")
        return text

    def prompt_ids(self, tokenizer: Any) -> list[int]:
        """The token ids the model continues: a chat prompt's from `chat_tokens.encode_chat` (the tokenizer's
        template and the generation prompt; contents as plain text), a prompt's with the tokenizer's BOS
        where it adds one (as training reads it).

        Raises:
            DataError: the chat template did not render to text.
        """
        if not self.messages:
            return list(tokenizer(self.prompt)["input_ids"])
        try:
            return encode_chat(tokenizer, list(self.messages), add_generation_prompt=True)
        except ValueError as exc:
            raise DataError(f"line {self.line}: {exc}") from None


def sample_of(example: Example, line: int) -> EvalSample:
    """The prompt and reference of one parsed line.

    Raises:
        DataError: a text line (no reference).
    """
    if example.format == PROMPT_COMPLETION:
        return EvalSample(line, example.completion, prompt=example.prompt)
    if example.format == CHAT:
        last = max(i for i, m in enumerate(example.messages) if m.role == "assistant")
        turns = tuple({"role": m.role, "content": m.content} for m in example.messages[:last])
        return EvalSample(line, example.messages[last].content, messages=turns)
    raise DataError(f"line {line}: a text line has no reference to grade against; graded evaluation needs "
                    "chat or prompt/completion lines")


def read_samples(path: str | os.PathLike[str], n: int) -> list[EvalSample]:
    """The first `n` valid lines of `path` as samples (invalid lines are skipped: the file was validated
    at upload, and training reports its problems).

    Raises:
        DataError: the file cannot be read, holds text lines, or has no valid line; the message names
            the file's line.
    """
    reader = LineReader(path, ValidationLimits())
    samples: list[EvalSample] = []
    for pl in reader:
        if pl.text is None:
            continue
        try:
            example = parse_record(pl.text)
        except RecordError:
            continue
        samples.append(sample_of(example, pl.number))
        if len(samples) >= n:
            break
    if reader.file_error and not samples:
        raise DataError(f"{path}: {reader.file_error}")
    if not samples:
        raise DataError(f"{path}: no valid chat or prompt/completion line to evaluate with")
    return samples
