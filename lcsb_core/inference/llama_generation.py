"""One served request on the llama.cpp engine: its `n` choices, decoded as `n` sequences of the engine's
continuous batch (`llama_serving.ContinuousBatcher`), read back from one queue as text pieces tagged
with their choice, each with the log probabilities of the tokens whose text it carries.

    run = engine.stream(ids, adapter, params, n=3, logprobs=2)   # lcsb_core.inference.llama_engine.LlamaEngine
    for piece in run.pieces(): piece.index, piece.text, piece.logprobs
    run.finish_reasons, run.completion_tokens                        # per choice; all choices' tokens

Each choice is decoded and cut as a request alone would be: its own tokens, text (a partial UTF-8
character waits for the rest of it), stop strings (cut, not returned; text that could still start
one is held back) and finish reason. A choice that meets a stop string stops its own sequence; the
others go on. A token's log probabilities travel with the piece that carries (the start of) its text,
so a token cut with a stop string, or an end token, has none in the answer.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

from lcsb_core.inference.llama_serving import Made
from lcsb_core.inference.logprobs import TokenLogprobs
from lcsb_core.inference.prompts import finish_reason, first_stop, stop_prefix_len
from lcsb_core.inference.sampling import SamplingParams


class TokenText(Protocol):
    """What a generation reads of its engine (`llama_engine.LlamaEngine` is one): the tokenizer, the end
    tokens and one token's bytes."""

    tokenizer: Any
    end_token_ids: frozenset[int]

    def token_bytes(self, token: int) -> bytes:
        """The bytes token `token` decodes to."""


@dataclass
class Piece:
    """Text of choice `index`, and the log probabilities of the tokens that text starts (JSON-ready:
    `token`, `bytes`, `logprob`, `top_logprobs` [{`token`, `bytes`, `logprob`}], `text_offset` in the
    answer); `logprobs` is empty when they were not asked for."""

    index: int
    text: str
    logprobs: list[dict[str, Any]] = field(default_factory=list)


class StopCutter:
    """`cut_stops` pushed piece by piece: `feed` returns the text that can be sent (held back while it
    could still start one of `stops`; up to the first stop when one appears, then `hit`), `flush` what
    is held at the end."""

    def __init__(self, stops: tuple[str, ...]) -> None:
        self.stops, self.held, self.hit = stops, "", False

    def feed(self, piece: str) -> str:
        """The text of `piece` (after what was held) that can be sent now."""
        if self.hit:
            return ""
        self.held += piece
        cut = first_stop(self.held, self.stops)
        if cut is not None:
            self.hit = True
            out, self.held = self.held[:cut], ""
            return out
        keep = stop_prefix_len(self.held, self.stops)
        out, self.held = self.held[:len(self.held) - keep], self.held[len(self.held) - keep:]
        return out

    def flush(self) -> str:
        """What is held (at the end of the answer, no stop string met)."""
        out, self.held = self.held, ""
        return out


@dataclass
class _Choice:
    cutter: StopCutter
    left: threading.Event                  # set: its sequence stops (a stop string, or the reader left)
    tokens: list[int] = field(default_factory=list)
    printed: int = 0                       # characters of decoded text confirmed
    sent: int = 0                          # characters handed out (after stop cutting)
    pending: list[tuple[int, TokenLogprobs]] = field(default_factory=list)   # (text offset, logprobs)
    finish_reason: str | None = None


class LlamaGeneration:
    """One request's `n` choices (see the module docstring), reading `out`, the queue its sequences
    share; `lefts[i]` stops choice i's sequence. Iterating it directly yields choice 0's text (n = 1);
    after the iteration `finish_reason` and `tokens` are choice 0's, `finish_reasons` every choice's,
    `completion_tokens` all choices' tokens (end tokens included). Leaving early frees every slot."""

    def __init__(self, engine: TokenText, prompt_ids: list[int], params: SamplingParams,
                 out: queue.SimpleQueue[Made | BaseException], lefts: list[threading.Event]) -> None:
        self.engine, self.prompt_ids, self.params, self.out = engine, prompt_ids, params, out
        self.choices = [_Choice(StopCutter(params.stop), left) for left in lefts]

    @property
    def tokens(self) -> list[int]:
        """Choice 0's token ids (an end token included when one ended it)."""
        return self.choices[0].tokens

    @property
    def finish_reason(self) -> str | None:
        """Choice 0's: "stop", "length", "cancelled" (None until it ended)."""
        return self.choices[0].finish_reason

    @property
    def finish_reasons(self) -> list[str | None]:
        """Every choice's finish reason, by index."""
        return [c.finish_reason for c in self.choices]

    @property
    def completion_tokens(self) -> int:
        """The tokens all choices made."""
        return sum(len(c.tokens) for c in self.choices)

    def __iter__(self) -> Iterator[str]:
        for piece in self.pieces():
            if piece.text:
                yield piece.text

    def pieces(self) -> Iterator[Piece]:
        """Each choice's pieces as its tokens are made, choices interleaved as the batch makes them.

        Raises:
            Exception: what decoding raised (every choice's sequence is stopped).
        """
        left = len(self.choices)
        try:
            while left:
                item = self.out.get()
                if isinstance(item, BaseException):
                    raise item
                c = self.choices[item.index]
                if item.token is None:
                    left -= 1
                    piece = self._end(item.index, c)
                elif c.cutter.hit or item.token in self.engine.end_token_ids:
                    if not c.cutter.hit:
                        c.tokens.append(item.token)   # the end token: counted, not shown; the sequence ends
                    continue
                else:
                    piece = self._token(item.index, c, item.token, item.logprobs)
                if piece is not None:
                    yield piece
        finally:
            for c in self.choices:
                c.left.set()   # ended, failed, or the reader left: every slot is freed

    def _token(self, index: int, c: _Choice, token: int, logprobs: TokenLogprobs | None) -> Piece | None:
        c.tokens.append(token)
        if logprobs is not None:
            c.pending.append((c.printed, logprobs))
        text = self.engine.tokenizer.decode(c.tokens, skip_special_tokens=True)
        new = ""
        if not text.endswith("\ufffd") and len(text) > c.printed:
            new, c.printed = text[c.printed:], len(text)
        out = c.cutter.feed(new) if new else ""
        if c.cutter.hit:
            c.left.set()   # this choice is done; its sequence stops, the others go on
        c.sent += len(out)
        return self._piece(index, c, out, final=False)

    def _end(self, index: int, c: _Choice) -> Piece | None:
        out = "" if c.cutter.hit else c.cutter.flush()
        c.sent += len(out)
        c.finish_reason = finish_reason(c.cutter.hit, c.tokens, self.engine.end_token_ids,
                                        self.params.max_new_tokens)
        return self._piece(index, c, out, final=not c.cutter.hit)

    def _piece(self, index: int, c: _Choice, text: str, *, final: bool) -> Piece | None:
        """A piece of `text` with the pending tokens whose text starts in what was sent (every one when
        `final`: no stop string cut the answer), or None when there is nothing to send."""
        k = len(c.pending) if final else sum(1 for offset, _ in c.pending if offset < c.sent)  # offsets only grow
        ready, c.pending = c.pending[:k], [] if c.cutter.hit else c.pending[k:]   # a stop string cut the rest
        if not text and not ready:
            return None
        return Piece(index, text, [self._entry(offset, lp) for offset, lp in ready])

    def _entry(self, offset: int, lp: TokenLogprobs) -> dict[str, Any]:
        def shown(token: int, logprob: float) -> dict[str, Any]:
            raw = self.engine.token_bytes(token)
            return {"token": raw.decode("utf-8", errors="replace"), "bytes": list(raw), "logprob": logprob}

        return {**shown(lp.token, lp.logprob), "top_logprobs": [shown(t, v) for t, v in lp.top], "text_offset": offset}
