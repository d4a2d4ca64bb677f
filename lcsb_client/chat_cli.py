"""`lcsb chat MODEL`: talk to a base model, one of your fine-tuned models (`ft:...`) or a checkpoint,
with the answer streamed as it is made (`/v1/chat/completions`).

    lcsb chat ft:SmolLM2-135M-Instruct:alice::ftjob-...                  # interactive; Ctrl-D ends
    lcsb chat SmolLM2-135M-Instruct --message "What is 2+2?"             # one turn
    printf 'Hi\\nAnd 3+3?\\n' | lcsb chat MODEL > answers.txt             # one turn per input line

On a terminal it shows a `you>` prompt and keeps the conversation; piped, it prints plain lines (each
answer on one line, nothing else on stdout), still one conversation.
"""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from lcsb_client.common import ApiKey, BaseUrl, connect, reports_errors
from lcsb_client.service import DEFAULT_BASE_URL, Service


def _answer(svc: Service, model: str, history: list[dict], plain: bool, **params: object) -> str:
    parts: list[str] = []
    finished: list[str] = []
    for piece in svc.chat_stream(model, history, on_finish=finished.append, **params):
        parts.append(piece)
        sys.stdout.write(piece.replace("\n", " ") if plain else piece)
        sys.stdout.flush()
    sys.stdout.write("\n")
    sys.stdout.flush()
    if "length" in finished:  # said apart from the answer, so a piped stdout stays the answers only
        limit = params.get("max_completion_tokens")
        sys.stderr.write(f"[cut: the answer reached {'--max-tokens ' + str(limit) if limit else 'the token limit'}]\n")
        sys.stderr.flush()
    return "".join(parts)


@reports_errors
def chat(model: Annotated[str, typer.Argument(help="a base model, ft:... model or checkpoint id")],
         message: Annotated[str | None, typer.Option("--message", "-m", help="one turn: ask this and exit")] = None,
         system: Annotated[str | None, typer.Option("--system", help="a system message first")] = None,
         temperature: Annotated[float | None, typer.Option(min=0, max=2)] = None,
         max_tokens: Annotated[int | None, typer.Option("--max-tokens", min=1)] = None,
         seed: Annotated[int | None, typer.Option()] = None,
         base_url: BaseUrl = DEFAULT_BASE_URL, api_key: ApiKey = None) -> None:
    """Chat with a model, streaming its answers (interactive, or one turn with --message)."""
    history: list[dict] = [{"role": "system", "content": system}] if system else []
    params = {"temperature": temperature, "max_completion_tokens": max_tokens, "seed": seed}
    interactive = message is None and sys.stdin.isatty()
    plain = not sys.stdout.isatty()
    with connect(base_url, api_key) as svc:
        turns = [message] if message is not None else None
        while True:
            if turns is not None:
                if not turns:
                    return
                text = turns.pop(0)
            else:
                if interactive:
                    sys.stderr.write("you> ")
                    sys.stderr.flush()
                line = sys.stdin.readline()
                if not line:
                    return
                text = line.rstrip("\n")
                if not text.strip():
                    continue
            history.append({"role": "user", "content": text})
            history.append({"role": "assistant", "content": _answer(svc, model, history, plain, **params)})
