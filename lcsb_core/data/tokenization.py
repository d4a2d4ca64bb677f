"""Turn validated examples into token ids and labels with the base model's tokenizer.

Chat examples are rendered with the tokenizer's own chat template (`apply_chat_template`). The
assistant spans are found by rendering the conversation incrementally: for assistant message k,
`render(messages[:k], add_generation_prompt=True)` ends where its content starts, and
`render(messages[:k+1])` holds the content followed by the template's end-of-turn special token
(`<|im_end|>` for SmolLM2). The text is then cut into segments (template text, assistant content +
end-of-turn) that are tokenized separately, so no token straddles a boundary and the supervised tokens
decode exactly to each assistant content plus its end-of-turn marker. (Tokenizing the prompt part alone
is also how generation sees it: the prompt ends with the generation header and the model continues.)
Rendering and tokenizing go through `lcsb_core.chat_tokens`, as serving and graded evaluation do: message
contents are plain text, so a `<|im_end|>` typed inside one is tokenized as text, never as the control
token (the segments of such an example are ready ids).

Labels: assistant turns with weight 1 (content + end-of-turn) are targets, everything else is -100,
unless `train_on_inputs` (then every token except weight-0 assistant turns is a target). Prompt/
completion: `prompt` then `completion` + EOS; the completion and EOS are targets. Text: every token
is a target, EOS appended. In all formats labels[0] is -100: the first token has nothing before it,
so it can never be predicted (the causal-LM loss shifts labels by one), and counting it would inflate
the target count. Labels are not shifted here.

    enc = ExampleEncoder(tokenizer, train_on_inputs=False)
    [(ids, labels)] = enc.encode([example])       # untruncated, same length
"""

from __future__ import annotations

import string
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from lcsb_core.chat_tokens import chat_template_error, render_chat, special_strings, token_pieces
from lcsb_core.data.formats import CHAT, PREFERENCE, PROMPT_COMPLETION, Example
from lcsb_core.data.json_lines import RecordError

IGNORE_INDEX = -100

Segment = tuple[str | list[int], bool]  # (text to tokenize or ready ids, is target)


@dataclass
class EncodedExample:
    """One training example. `input_ids` and `labels` have the same length (at most max_seq_len);
    labels are -100 where not a target and are not shifted. `line` is the 1-based physical line in
    the source file (for a .txt corpus: the 1-based block index)."""

    input_ids: list[int]
    labels: list[int]
    line: int

    @property
    def num_targets(self) -> int:
        """Number of target tokens (labels != -100)."""
        return sum(1 for x in self.labels if x != IGNORE_INDEX)


class ExampleEncoder:
    """Encode `Example`s for one tokenizer (a transformers fast tokenizer).

    `special_strings` are the tokenizer's special token texts (used to find end-of-turn markers and to
    warn about content that contains them). `turns_without_eot` counts assistant turns whose template
    closes them with no special token (the model would not learn to stop).
    """

    def __init__(self, tokenizer: Any, *, train_on_inputs: bool = False) -> None:
        self.tokenizer = tokenizer
        self.train_on_inputs = train_on_inputs
        self.eos_id: int | None = tokenizer.eos_token_id
        self.special_strings = special_strings(tokenizer)
        self.bos_ids = self._bos_ids()
        self.turns_without_eot = 0
        self._good_chars: set[str] = set()
        self._bad_chars: set[str] = set()
        self._probe_chars(set(string.printable))

    def _bos_ids(self) -> list[int]:
        bos = self.tokenizer.bos_token_id
        if bos is None:
            return []
        with_special = self.tokenizer("a", add_special_tokens=True)["input_ids"]
        without = self.tokenizer("a", add_special_tokens=False)["input_ids"]
        return [bos] if with_special[:1] == [bos] and without[:1] != [bos] else []

    def format_error(self, fmt: str) -> str | None:
        """Why this tokenizer (with this encoder's `train_on_inputs`) cannot encode data of format `fmt`,
        or None when it can. Preference data is rendered as conversations (`formats.preference_sides`), so
        it needs a chat template, and its targets are the answers only, so `train_on_inputs` is refused."""
        if fmt == CHAT:
            return chat_template_error(self.tokenizer)
        if fmt == PREFERENCE:
            if self.train_on_inputs:
                return ("train_on_inputs does not apply to preference data: DPO scores only the answers "
                        "(preferred_output and non_preferred_output) given the input; leave train_on_inputs off")
            if not getattr(self.tokenizer, "chat_template", None):
                name = getattr(self.tokenizer, "name_or_path", "") or type(self.tokenizer).__name__
                return (f"the base model's tokenizer ({name}) has no chat template, so preference data (rendered "
                        "as conversations) cannot be encoded; use a model with a chat template")
            return None
        if self.eos_id is None:
            return "the base model's tokenizer has no end-of-sequence token; cannot mark where examples end"
        return None

    def contains_special(self, example: Example) -> bool:
        """True when any text of the example contains a special token string (e.g. `<|im_end|>`): a
        prompt/completion or text example's tokenizes as that control token, a chat message's as text."""
        return any(s in text for text in example.strings() for s in self.special_strings)

    def _probe_chars(self, chars: set[str]) -> None:
        probes = sorted(chars)
        encoded = self.tokenizer(["a" + c for c in probes], add_special_tokens=False)["input_ids"]
        for c, ids in zip(probes, encoded, strict=True):
            text = self.tokenizer.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)
            (self._good_chars if text == "a" + c else self._bad_chars).add(c)

    def lossy_chars(self, example: Example) -> set[str]:
        """Characters of the example that the tokenizer cannot represent (encoding then decoding loses
        them; e.g. SmolLM2's byte-level vocabulary lacks the bytes of some control characters and of
        code points U+40000-U+BFFFF). Each distinct character is probed once and cached."""
        chars: set[str] = set()
        for text in example.strings():
            chars.update(text)
        chars -= self._good_chars
        if not chars:
            return chars
        new = chars - self._bad_chars
        if new:
            self._probe_chars(new)
        return chars & self._bad_chars

    # -- segments -------------------------------------------------------------------------------
    def _render(self, messages: list[dict], add_generation_prompt: bool) -> str:
        out = self.tokenizer.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=add_generation_prompt
        )
        if not isinstance(out, str):
            raise RecordError("messages", "the chat template did not render to text")
        return out

    def _end_of_turn(self, delta: str, start: int) -> int:
        """Index in `delta` just past the end-of-turn special token following `start`, or `start`."""
        best = -1
        best_end = start
        for s in self.special_strings:
            pos = delta.find(s, start)
            if pos >= 0 and (best < 0 or pos < best) and not delta[start:pos].strip():
                best, best_end = pos, pos + len(s)
        if best < 0:
            self.turns_without_eot += 1
        return best_end

    def _chat_segments(self, example: Example) -> list[Segment]:
        msgs = [{"role": m.role, "content": m.content} for m in example.messages]
        try:
            chat = render_chat(self.tokenizer, msgs)
            full = chat.text
            spans: list[tuple[int, bool]] = []  # (end offset in `full`, is target) of each segment
            for k, m in enumerate(example.messages):
                if m.role != "assistant":
                    continue
                pre = self._render(msgs[:k], True)
                post = full if k == len(msgs) - 1 else self._render(msgs[: k + 1], False)
                if not (post.startswith(pre) and full.startswith(post)):
                    raise RecordError(
                        "messages",
                        "the base model's chat template does not render conversations prefix by prefix, "
                        "so assistant turns cannot be located",
                    )
                delta = post[len(pre):]
                idx = delta.find(m.content) if m.content else 0
                if idx < 0:
                    raise RecordError(f"messages[{k}].content",
                                      "the chat template changes this content; cannot locate it")
                end = self._end_of_turn(delta, idx + len(m.content))
                start_abs, end_abs = len(pre) + idx, len(pre) + end
                spans.append((start_abs, self.train_on_inputs))
                spans.append((end_abs, m.weight == 1))
            spans.append((len(full), self.train_on_inputs))
            if chat.plain:  # text pieces, tokenized in one batch by `encode_segments` (the same ids)
                bounds = [0, *(end for end, _ in spans)]
                return [(full[a:b], t) for a, b, (_, t) in zip(bounds, bounds[1:], spans, strict=False)]
            pieces = token_pieces(self.tokenizer, chat, [end for end, _ in spans[:-1]])
            return [(ids, t) for ids, (_, t) in zip(pieces, spans, strict=True)]
        except RecordError:
            raise
        except Exception as exc:  # noqa: BLE001 - jinja raise_exception() and friends: the template refuses it
            raise RecordError("messages", f"the base model's chat template rejects this conversation: {exc}") from None

    def segments(self, example: Example) -> list[Segment]:
        """The example as (text or token ids, is_target) pieces, in order. Raises RecordError when the
        chat template cannot render it."""
        if example.format == CHAT:
            return self._chat_segments(example)
        eos = [self.eos_id] if self.eos_id is not None else []
        if example.format == PROMPT_COMPLETION:
            toi = self.train_on_inputs
            return [(self.bos_ids, toi), (example.prompt, toi), (example.completion, True), (eos, True)]
        return [(self.bos_ids, True), (example.text, True), (eos, True)]

    # -- tokens ---------------------------------------------------------------------------------
    def encode_segments(self, all_segments: Sequence[list[Segment]]) -> list[tuple[list[int], list[int]]]:
        """Tokenize many examples' segments in one batched tokenizer call. Returns (input_ids, labels)
        per example, untruncated, labels[0] = -100."""
        texts = [seg for segs in all_segments for seg, _ in segs if isinstance(seg, str) and seg]
        ids_iter = iter(self.tokenizer(texts, add_special_tokens=False)["input_ids"] if texts else [])
        out = []
        for segs in all_segments:
            ids: list[int] = []
            labels: list[int] = []
            for seg, target in segs:
                if isinstance(seg, str):
                    if not seg:
                        continue
                    piece = list(next(ids_iter))
                else:
                    piece = list(seg)
                ids.extend(piece)
                labels.extend(piece if target else [IGNORE_INDEX] * len(piece))
            if labels:
                labels[0] = IGNORE_INDEX
            out.append((ids, labels))
        return out

    def encode(self, examples: Sequence[Example]) -> list[tuple[list[int], list[int]]]:
        """`segments` then `encode_segments` for a batch. Raises RecordError on the first example the
        template rejects (the validator calls `segments` per example to attribute errors to lines)."""
        return self.encode_segments([self.segments(e) for e in examples])
