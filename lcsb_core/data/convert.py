"""Converters from other data sets' rows to the service's formats.

    from lcsb_core.data import gsm8k_to_chat, convert_jsonl
    gsm8k_to_chat({"question": "1+1?", "answer": "2\\n#### 2"})
    # {"messages": [{"role": "user", "content": "1+1?"}, {"role": "assistant", "content": "2\\n#### 2"}]}
    convert_jsonl("gsm8k/train.jsonl", "train_chat.jsonl", gsm8k_to_chat)   # streams, returns the row count
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from pathlib import Path

from lcsb_core.errors import DataError


def gsm8k_to_chat(row: dict) -> dict:
    """Turn a GSM8K row `{"question": str, "answer": str}` into a chat example with one user turn (the
    question) and one assistant turn (the whole answer, worked solution and `#### <number>` line).

    Raises:
        DataError: the row lacks a string `question` or `answer`.
    """
    if not isinstance(row, dict):
        raise DataError(f"a GSM8K row must be an object, got {type(row).__name__}")
    for key in ("question", "answer"):
        if not isinstance(row.get(key), str):
            raise DataError(f"a GSM8K row needs a string {key!r}")
    return {
        "messages": [
            {"role": "user", "content": row["question"]},
            {"role": "assistant", "content": row["answer"]},
        ]
    }


FINAL_ANSWER_INSTRUCTION = "What is the final answer? Reply with the number only."
_CALCULATOR = re.compile(r"<<[^<>]*>>")


def gsm8k_final_answer(row: dict) -> dict:
    """Turn a GSM8K row into an extraction example: the user turn holds the worked solution (GSM8K's
    calculator annotations `<<48/2=24>>` and the `#### <number>` line removed; not the problem, which
    would double the prompt) and asks for the final answer as a number only; the assistant turn is the
    number after `####`, as GSM8K writes it. The skill is reading the result off a worked solution and
    answering in the asked format, not solving the problem (the README's main job).

    Raises:
        DataError: the row lacks a string `question` or `answer`, or the answer has no `####` line.
    """
    gsm8k_to_chat(row)   # the row's checks
    solution, mark, final = row["answer"].rpartition("####")
    if not mark or not final.strip():
        raise DataError("a GSM8K answer needs a final '#### <number>' line")
    worked = _CALCULATOR.sub("", solution).strip()
    return {
        "messages": [
            {"role": "user", "content": f"Worked solution:\n{worked}\n\n{FINAL_ANSWER_INSTRUCTION}"},
            {"role": "assistant", "content": final.strip()},
        ]
    }


def convert_jsonl(
    src: str | os.PathLike[str], dst: str | os.PathLike[str], row_fn: Callable[[dict], dict]
) -> int:
    """Stream `src` (JSONL) through `row_fn` into `dst` (JSONL, UTF-8, LF line ends). Blank lines are
    skipped. Returns the number of rows written.

    Raises:
        DataError: a line of `src` is not JSON (the message names it) or `row_fn` rejects a row.
    """
    count = 0
    with Path(src).open("r", encoding="utf-8-sig") as fin, Path(dst).open("w", encoding="utf-8", newline="\n") as fout:
        for number, line in enumerate(fin, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise DataError(f"{src}: line {number} is not valid JSON: {exc.msg}") from None
            try:
                out = row_fn(row)
            except DataError as exc:
                raise DataError(f"{src}: line {number}: {exc}") from None
            fout.write(json.dumps(out, ensure_ascii=False) + "\n")
            count += 1
    return count
