"""The `choices` of a chat or completions answer in OpenAI's shapes, from an inference worker's records
(`lcsb_service.streams`: `delta`s carry `i`, the choice's index, and with log probabilities asked their
tokens' `logprobs`).

    choice("chat", 1, text="Hi", finish="stop", logprobs=chat_logprobs(entries), whole=True)

Log probabilities: chat's `{"content": [{token, logprob, bytes, top_logprobs: [{token, logprob,
bytes}]}], "refusal": null}`; completions' legacy `{tokens, token_logprobs, top_logprobs: [{token:
logprob}], text_offset}`, whose `top_logprobs` hold the `logprobs` most likely tokens and the sampled
one (up to `logprobs` + 1, as OpenAI's did) and whose `text_offset` counts from the prompt's start (the
answer's first character is at `len(prompt)`).
"""

from __future__ import annotations

from typing import Any

_SHOWN = ("token", "logprob", "bytes")


def chat_logprobs(entries: list[dict[str, Any]]) -> dict[str, Any]:
    """Chat's `logprobs` object of the worker's token `entries`."""
    content = [{**{k: e[k] for k in _SHOWN}, "top_logprobs": [{k: t[k] for k in _SHOWN} for t in e["top_logprobs"]]}
               for e in entries]
    return {"content": content, "refusal": None}


def legacy_logprobs(entries: list[dict[str, Any]], prompt_chars: int) -> dict[str, Any]:
    """Completions' legacy `logprobs` object of the worker's token `entries` (offsets after a prompt of
    `prompt_chars` characters)."""
    tops = []
    for e in entries:
        top = {t["token"]: t["logprob"] for t in e["top_logprobs"]}
        top.setdefault(e["token"], e["logprob"])   # the sampled token is always there
        tops.append(top)
    return {"tokens": [e["token"] for e in entries], "token_logprobs": [e["logprob"] for e in entries],
            "top_logprobs": tops, "text_offset": [prompt_chars + e["text_offset"] for e in entries]}


def logprobs_of(kind: str, entries: list[dict[str, Any]] | None, prompt_chars: int) -> dict[str, Any] | None:
    """The `logprobs` object of a choice (None when the request did not ask for them: `entries` None)."""
    if entries is None:
        return None
    return chat_logprobs(entries) if kind == "chat" else legacy_logprobs(entries, prompt_chars)


def choice(kind: str, index: int, *, text: str | None, finish: str | None, logprobs: dict[str, Any] | None = None,
           first: bool = False, whole: bool = False) -> dict[str, Any]:
    """Choice `index` of an answer (`whole`) or of a chunk (`first`: chat's role delta)."""
    if kind == "completion":
        return {"index": index, "text": text or "", "logprobs": logprobs, "finish_reason": finish}
    if whole:
        return {"index": index, "message": {"role": "assistant", "content": text, "refusal": None},
                "logprobs": logprobs, "finish_reason": finish}
    delta: dict[str, Any] = {"role": "assistant", "content": ""} if first else {} if text is None else {"content": text}
    return {"index": index, "delta": delta, "logprobs": logprobs, "finish_reason": finish}


def finish_reasons(end: dict[str, Any], n: int) -> list[str]:
    """Each choice's finish reason from the worker's `end` record (one `finish_reason` from an older worker)."""
    reasons = list(end.get("finish_reasons") or [end["finish_reason"]] * n)
    return reasons + [reasons[-1]] * (n - len(reasons))
