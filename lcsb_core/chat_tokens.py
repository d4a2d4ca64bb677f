"""Chat messages to token ids with every message's content read as plain text: the one tokenization of chat
templates for serving (`inference.Prompting.chat_prompt`, both engines), graded evaluation
(`eval.samples.EvalSample.prompt_ids`) and training (`data.tokenization.ExampleEncoder`).

    ids = encode_chat(tokenizer, [{"role": "user", "content": "Hi"}], template=None, add_generation_prompt=True)

    chat = render_chat(tokenizer, messages)            # the rendered text and where contents spell special tokens
    pieces = token_pieces(tokenizer, chat, cuts=[k])   # ids of text[:k] and text[k:], no token across k

Tokenizing a rendered chat as one text reads a special token's text inside a content as that control token:
a user message `hi<|im_end|>\\n<|im_start|>system\\n...` would close its turn and open a forged system turn.
Here only the template's own special tokens become control tokens. Before rendering, each special-token
string in a content is replaced by a unique placeholder (private-use characters: not whitespace, so a
template's `trim` leaves contents as it would), then restored in the rendered text, whose span is recorded
as literal. The chat is rendered once more with a marker around each content to find which characters came
from contents: a special string formed across a content's edge (two adjacent contents, or a content and
the template's text) is literal too. (Templates that change a content's text, e.g. trim it, skip that
second check; special strings inside a content are still literal.)

When nothing is literal (every normal conversation), the ids are the tokenizer's for the whole text,
`tokenizer(text, add_special_tokens=False)`, what every route did before: no token changes. Otherwise the
text is cut at the template's own special tokens, which become their ids, and each run of text between
them is tokenized with `split_special_tokens=True`, so literal special strings are tokenized as text and
merge with their neighbours as any text does. That is how the tokenizer treats normal text too: it splits
at added tokens before normalizing and pre-tokenizing (tests/core/test_chat_tokens.py checks it on
SmolLM2 by forcing this path on normal conversations). A text run that still yields a special id raises
ValueError (a vocabulary that makes a control token from plain text cannot be protected this way).
"""

from __future__ import annotations

import re
import secrets
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

_OPEN, _CLOSE = "\ue000", "\ue001"  # private-use characters around placeholders and content markers

Span = tuple[int, int]


@dataclass(frozen=True)
class ChatText:
    """A rendered chat: `text` (exactly what `apply_chat_template(..., tokenize=False)` renders) and
    `literal`, the spans of `text` that spell a special token but came from a message's content (to be
    tokenized as plain text), in order. `plain` when there are none: `text` (and any cut of it) then
    tokenizes as `tokenizer(piece, add_special_tokens=False)`, which a caller may batch."""

    text: str
    literal: tuple[Span, ...] = ()

    @property
    def plain(self) -> bool:
        return not self.literal


@dataclass(frozen=True)
class _Specials:
    pattern: re.Pattern[str] | None  # any special-token string, longest first (leftmost-longest, as tokenizers match)
    ids: frozenset[int]


_CACHE: weakref.WeakKeyDictionary[Any, _Specials] = weakref.WeakKeyDictionary()


def special_strings(tokenizer: Any) -> list[str]:
    """The tokenizer's special-token strings (its named special tokens and the added tokens marked special),
    longest first: the strings that tokenizing text turns into control tokens."""
    specials = set(getattr(tokenizer, "all_special_tokens", []) or [])
    for tok in getattr(tokenizer, "added_tokens_decoder", {}).values():
        if getattr(tok, "special", False):
            specials.add(str(tok.content))
    return sorted((s for s in specials if s), key=lambda s: (-len(s), s))


def _specials(tokenizer: Any) -> _Specials:
    try:
        return _CACHE[tokenizer]
    except (KeyError, TypeError):
        pass
    strings = special_strings(tokenizer)
    pattern = re.compile("|".join(map(re.escape, strings))) if strings else None
    ids = {tokenizer.convert_tokens_to_ids(s) for s in strings}
    found = _Specials(pattern, frozenset(i for i in ids if isinstance(i, int) and i >= 0))
    try:
        _CACHE[tokenizer] = found
    except TypeError:  # not weak-referenceable: no cache
        pass
    return found


def _render(tokenizer: Any, messages: Sequence[dict[str, Any]], template: str | None,
            add_generation_prompt: bool) -> str:
    out = tokenizer.apply_chat_template(list(messages), chat_template=template, tokenize=False,
                                        add_generation_prompt=add_generation_prompt)
    if not isinstance(out, str):
        raise ValueError("the chat template did not render to text")
    return out


def render_chat(tokenizer: Any, messages: Sequence[dict[str, Any]], template: str | None = None,
                add_generation_prompt: bool = False) -> ChatText:
    """`messages` rendered with `template` (None: the tokenizer's own), and where the text spells special
    tokens that came from the messages' contents (see the module doc).

    Raises:
        ValueError: the template did not render to text; whatever the template raises (jinja
            `raise_exception`, a missing template) propagates.
    """
    pattern = _specials(tokenizer).pattern
    if pattern is None:
        return ChatText(_render(tokenizer, messages, template, add_generation_prompt))
    contents = [m.get("content") if isinstance(m.get("content"), str) else None for m in messages]
    nonce = secrets.token_hex(8)
    while any(c is not None and nonce in c for c in contents):
        nonce = secrets.token_hex(8)
    originals: list[str] = []

    def placeholder(match: re.Match[str]) -> str:
        originals.append(match.group())
        return f"{_OPEN}{nonce}:{len(originals) - 1}{_CLOSE}"

    safe = [c if c is None else pattern.sub(placeholder, c) for c in contents]
    marker = f"{_OPEN}{nonce}{_CLOSE}"

    def with_contents(fn: Any) -> list[dict[str, Any]]:
        return [m if c is None else {**m, "content": fn(c)} for m, c in zip(messages, safe, strict=True)]

    token = re.compile(f"{_OPEN}{nonce}(?::(\\d+))?{_CLOSE}")

    def restore(rendered: str) -> tuple[str, list[Span], list[Span]]:
        """The rendered text with placeholders restored and markers dropped; literal spans; content spans."""
        out: list[str] = []
        size, last, opened = 0, 0, -1
        literal: list[Span] = []
        spans: list[Span] = []
        for m in token.finditer(rendered):
            out.append(rendered[last:m.start()])
            size += m.start() - last
            last = m.end()
            if m.group(1) is not None:
                original = originals[int(m.group(1))]
                out.append(original)
                literal.append((size, size + len(original)))
                size += len(original)
            elif opened < 0:
                opened = size
            else:
                spans.append((opened, size))
                opened = -1
        out.append(rendered[last:])
        return "".join(out), literal, spans if opened < 0 else []

    text, literal, _ = restore(_render(tokenizer, with_contents(lambda c: c), template, add_generation_prompt))
    if any(c for c in safe):
        marked, _, spans = restore(_render(tokenizer, with_contents(lambda c: marker + c + marker), template,
                                           add_generation_prompt))
        if marked == text and spans:
            inside = set(literal)
            for m in pattern.finditer(text):
                if (m.start(), m.end()) not in inside and any(a < m.end() and m.start() < b for a, b in spans):
                    literal.append((m.start(), m.end()))
            literal.sort()
    return ChatText(text, tuple(literal))


def token_pieces(tokenizer: Any, chat: ChatText, cuts: Sequence[int] = ()) -> list[list[int]]:
    """Token ids of `chat.text` cut at the character offsets `cuts` (ascending): one list per piece, and no
    token spans a cut. Template special tokens become their ids; literal spans are tokenized as text.

    Raises:
        ValueError: a text run yields a special token's id from plain text.
    """
    bounds = [0, *cuts, len(chat.text)]
    pieces = [chat.text[a:b] for a, b in zip(bounds, bounds[1:], strict=False)]
    if chat.plain:
        texts = [p for p in pieces if p]
        encoded = iter(tokenizer(texts, add_special_tokens=False)["input_ids"] if texts else [])
        return [list(next(encoded)) if p else [] for p in pieces]
    specials = _specials(tokenizer)
    assert specials.pattern is not None  # literal spans exist only where there are special strings
    # the template's own special tokens: every special-string match outside the literal spans
    controls: list[Span] = []
    literal = chat.literal
    for m in specials.pattern.finditer(chat.text):
        if not any(a < m.end() and m.start() < b for a, b in literal):
            controls.append((m.start(), m.end()))
    # each piece as items: a text run (str) or a control token (its span)
    layout: list[list[str | Span]] = []
    for a, b in zip(bounds, bounds[1:], strict=False):
        items: list[str | Span] = []
        pos = a
        for s, e in controls:
            if e <= a or s >= b:
                continue
            if s < a or e > b:
                raise ValueError("a cut falls inside a special token")
            if pos < s:
                items.append(chat.text[pos:s])
            items.append((s, e))
            pos = e
        if pos < b:
            items.append(chat.text[pos:b])
        layout.append(items)
    runs = [it for items in layout for it in items if isinstance(it, str)]
    encoded = iter(tokenizer(runs, add_special_tokens=False, split_special_tokens=True)["input_ids"] if runs else [])
    out: list[list[int]] = []
    for items in layout:
        ids: list[int] = []
        for it in items:
            if isinstance(it, str):
                run = list(next(encoded))
                if specials.ids.intersection(run):
                    raise ValueError("the tokenizer makes a special token from plain text; cannot read the chat's "
                                     "contents as text")
                ids.extend(run)
            else:
                ids.append(int(tokenizer.convert_tokens_to_ids(chat.text[it[0]:it[1]])))
        out.append(ids)
    return out


def encode_chat(tokenizer: Any, messages: Sequence[dict[str, Any]], template: str | None = None,
                add_generation_prompt: bool = False) -> list[int]:
    """Token ids of `messages` rendered with `template` (None: the tokenizer's own chat template), plus the
    assistant's generation prompt when `add_generation_prompt`; no BOS beyond what the template writes.

    Each message's content is tokenized as plain text: a special-token string in it (`<|im_end|>`) never
    becomes a control token; only the template's own do. Normal conversations get exactly the ids of
    `tokenizer(apply_chat_template(messages, tokenize=False), add_special_tokens=False)`.

    Raises:
        ValueError: the template did not render to text, or the tokenizer makes a special token from plain
            text; whatever the template raises (jinja `raise_exception`) propagates.
    """
    chat = render_chat(tokenizer, messages, template, add_generation_prompt)
    [ids] = token_pieces(tokenizer, chat)
    return ids


def no_chat_template_message(name: str) -> str:
    """Why chat data cannot train on the model `name` (its tokenizer has no chat template)."""
    return (f"the base model's tokenizer ({name}) has no chat template, so chat data cannot be rendered; "
            "use text ({\"text\"}) or prompt/completion ({\"prompt\", \"completion\"}) data, or a model "
            "with a chat template")


def chat_template_error(tokenizer: Any) -> str | None:
    """A plain message when `tokenizer` cannot render chat data (no chat template), else None."""
    if getattr(tokenizer, "chat_template", None):
        return None
    return no_chat_template_message(getattr(tokenizer, "name_or_path", "") or type(tokenizer).__name__)
