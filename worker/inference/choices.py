"""A request's answer on its engine, written to its stream as records (`lcsb_service.streams`): `start`
(prompt tokens), `delta`s (`text`, `i` the choice's index, `logprobs` when asked: the log probabilities
of the tokens the text starts), then one `end` (`finish_reasons` by index, `finish_reason` choice 0's,
`completion_tokens` all choices' tokens).

    answer(streams, req, engine, ids, adapter_dir, t0)

On llama.cpp the request's `n` choices are `n` sequences of the engine's continuous batch, their pieces
written as the batch makes them (`lcsb_core.inference.llama_generation`). The transformers fallback answers the
choices one after the other (choice i seeded `seed + i` too: `lcsb_core.inference.choice_params`) and
has no log probabilities: a request for them is refused before it starts (`unsupported`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from typing import Any

from lcsb_core.inference.adapters import AdapterRef
from lcsb_service.chat import GenerationRequest
from lcsb_service.streams import TokenStreams

log = logging.getLogger(__name__)


def unsupported(req: GenerationRequest, engine: Any) -> dict[str, Any] | None:
    """The 400 record for what `engine` cannot answer (log probabilities on the transformers engine), or None."""
    from lcsb_core.inference.llama_engine import LlamaEngine

    if req.logprobs is None or isinstance(engine, LlamaEngine):
        return None
    param = "top_logprobs" if req.kind == "chat" and req.logprobs else "logprobs"
    return {"t": "error", "status": 400, "code": "unsupported_parameter", "param": param,
            "message": f"{param}: this worker serves {req.model} with the transformers engine, which gives no log "
                       "probabilities (the llama.cpp engine does: LCSB_INFERENCE_ENGINE auto or llama_cpp on CPU); "
                       "leave logprobs out"}


class _OneAfterAnother:
    """The transformers engine's choices, one generation after the other, as pieces (index, text, [])."""

    def __init__(self, engine: Any, ids: list[int], adapter: AdapterRef | None, params: Any, n: int,
                 should_stop: Any) -> None:
        self.engine, self.ids, self.adapter, self.params, self.n = engine, ids, adapter, params, n
        self.should_stop = should_stop
        self.finish_reasons: list[str | None] = []
        self.completion_tokens = 0

    def pieces(self) -> Iterator[tuple[int, str, list[dict[str, Any]]]]:
        from lcsb_core.inference import choice_params

        for i in range(self.n):
            params = choice_params(self.params, i)
            run = self.engine.stream(self.ids, self.adapter, params, should_stop=self.should_stop)
            for text in run:
                yield i, text, []
            self.finish_reasons.append(run.finish_reason)
            self.completion_tokens += run.completion_tokens
            if run.finish_reason == "cancelled":
                return


def answer(streams: TokenStreams, req: GenerationRequest, engine: Any, ids: list[int], adapter: AdapterRef | None,
           t0: float) -> None:
    """Generate `req`'s choices from prompt `ids` with `adapter` and write their records (see the
    module docstring); a cancelled request (the client left) writes no `end` and discards its stream."""
    from lcsb_core.inference import SamplingParams
    from lcsb_core.inference.llama_engine import LlamaEngine

    params = SamplingParams(max_new_tokens=req.max_new_tokens, temperature=req.temperature, top_p=req.top_p,
                            seed=req.seed, stop=tuple(req.stop), frequency_penalty=req.frequency_penalty,
                            presence_penalty=req.presence_penalty)
    should_stop = lambda: streams.cancelled(req.id)  # noqa: E731
    run: Any
    if isinstance(engine, LlamaEngine):
        run = engine.stream(ids, adapter, params, should_stop=should_stop, n=req.n, logprobs=req.logprobs)
        pieces = ((p.index, p.text, p.logprobs) for p in run.pieces())
    else:
        run = _OneAfterAnother(engine, ids, adapter, params, req.n, should_stop)
        pieces = run.pieces()
    streams.append(req.id, {"t": "start", "prompt_tokens": len(ids)})
    for index, text, logprobs in pieces:
        record: dict[str, Any] = {"t": "delta", "text": text, "i": index}
        if req.logprobs is not None:
            record["logprobs"] = logprobs
        streams.append(req.id, record)
    reasons = list(run.finish_reasons)
    if "cancelled" in reasons or len(reasons) < req.n:
        log.info("request %s cancelled after %d tokens", req.id, run.completion_tokens)
        streams.discard(req.id)
        return
    streams.append(req.id, {"t": "end", "finish_reason": reasons[0], "finish_reasons": reasons,
                            "completion_tokens": run.completion_tokens})
    log.info("request %s on %s: %d + %d tokens (%d choices) in %.2f s (%s); adapters cached %d (%.1f MiB), loaded %d "
             "so far", req.id, req.model, len(ids), run.completion_tokens, req.n, time.monotonic() - t0,
             ",".join(str(r) for r in reasons), len(engine.adapters.lru), engine.adapters.mib, engine.adapters.loads)
