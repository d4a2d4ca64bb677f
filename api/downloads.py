"""Streamed downloads with their name: `Content-Disposition: attachment` naming the file as RFC 6266
says, an ASCII `filename` for old clients and `filename*=UTF-8''<percent-encoded>` (RFC 8187, formerly
5987) with the exact name, so `curl -OJ`, browsers and `wget --content-disposition` keep the uploaded
name and extension (`données-日本.jsonl`).

    return download(storage.iter_bytes(key), size=row.bytes, media_type="application/gzip", filename=name)
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterator
from urllib.parse import quote

from fastapi.responses import StreamingResponse

_NOT_TOKEN_SAFE = re.compile(r'[^\x20-\x7e]|["\\%]')  # outside printable ASCII, or would need quoting
_RFC8187_SAFE = "!#$&+-.^_`|~"  # attr-char besides letters and digits


def content_disposition(filename: str, fallback: str = "download") -> str:
    """`attachment; filename="<ASCII>"; filename*=UTF-8''<percent-encoded>` for `filename` (its last
    path component). The ASCII name drops accents (NFKD) and other non-ASCII letters, and replaces
    quotes, backslashes, `%` and control characters by `_`; `fallback` stands in for a stem that
    nothing is left of (`日本.jsonl` -> `<fallback>.jsonl`). A plain ASCII name is sent as `filename` only."""
    name = re.split(r"[/\\]", filename)[-1].strip() or fallback
    ascii_name = unicodedata.normalize("NFKD", name).encode("ascii", "ignore").decode()
    ascii_name = _NOT_TOKEN_SAFE.sub("_", ascii_name).strip()
    if not ascii_name or ascii_name.startswith(".") and not name.startswith("."):
        ascii_name = fallback + ascii_name
    if ascii_name == name:
        return f'attachment; filename="{name}"'
    return f"attachment; filename=\"{ascii_name}\"; filename*=UTF-8''{quote(name, safe=_RFC8187_SAFE)}"


def download(chunks: Iterator[bytes], *, size: int, media_type: str, filename: str,
             fallback: str = "download") -> StreamingResponse:
    """A streamed attachment of `size` bytes named `filename` (`content_disposition`)."""
    return StreamingResponse(chunks, media_type=media_type,
                             headers={"Content-Length": str(size),
                                      "Content-Disposition": content_disposition(filename, fallback)})
