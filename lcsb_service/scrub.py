"""Keep worker filesystem paths out of what users download: the run's JSON files (`config.json`,
`summary.json`) name data files, the run folder and the base model by local path; published, each path
becomes what the user knows it by. `scrub_paths` rewrites JSON values; `scrub_text` the same folders
inside free text (a file that is not JSON).

    scrub_paths({"output_dir": "/srv/runs/ftjob-1", "adapter_dir": "/srv/runs/ftjob-1/adapter"},
                {"/srv/runs/ftjob-1": ""})        # {"output_dir": ".", "adapter_dir": "adapter"}
"""

from __future__ import annotations

import re
from pathlib import PurePosixPath
from typing import Any

_ABSOLUTE = re.compile(r"^(?:/|~/|[A-Za-z]:[\\/])")


def _scrub(text: str, prefixes: list[tuple[str, str]]) -> str:
    for local, public in prefixes:
        if text == local:
            return public or "."
        if text.startswith(local + "/"):
            rest = text[len(local) + 1:]
            return f"{public}/{rest}" if public else rest
    if _ABSOLUTE.match(text):  # a path no prefix covers: keep its name only, never the folders above it
        return PurePosixPath(text.replace("\\", "/")).name
    return text


def _ordered(prefixes: dict[str, str]) -> list[tuple[str, str]]:
    return sorted(((k.rstrip("/"), v) for k, v in prefixes.items() if k), key=lambda kv: len(kv[0]), reverse=True)


def scrub_text(text: str, prefixes: dict[str, str]) -> str:
    """`text` with each folder of `prefixes` replaced where it appears (longest first): "<folder>/x"
    becomes "<public>/x" (or "x" when public is ""), a bare "<folder>" becomes the public name (or ".")."""
    for local, public in _ordered(prefixes):
        text = text.replace(local + "/", f"{public}/" if public else "").replace(local, public or ".")
    return text


def scrub_paths(value: Any, prefixes: dict[str, str]) -> Any:
    """`value` (JSON data) with every string that is a local path rewritten: a path under one of
    `prefixes` (local folder -> public name; "" drops the folder) is made relative to it, the longest
    prefix first; any other absolute path is cut to its last component. Other strings are unchanged."""
    ordered = _ordered(prefixes)
    def walk(v: Any) -> Any:
        if isinstance(v, str):
            return _scrub(v, ordered)
        if isinstance(v, dict):
            return {k: walk(x) for k, x in v.items()}
        if isinstance(v, list):
            return [walk(x) for x in v]
        return v
    return walk(value)
