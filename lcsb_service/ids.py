"""Public object ids in OpenAI's style: a type prefix and 24 random base-62 characters
(`file-...`, `ftjob-...`, `ftevent-...`, `ftckpt-...`, `key-...`, `owner-...`)."""

from __future__ import annotations

import re
import secrets
import string
from datetime import UTC, datetime
from typing import overload

_ALPHABET = string.ascii_letters + string.digits
_ID_SHAPE = re.compile(r"[A-Za-z0-9_-]{1,64}")


def new_id(prefix: str, length: int = 24) -> str:
    """`<prefix>-<length random base-62 characters>` (about 143 bits for the default length)."""
    return f"{prefix}-" + "".join(secrets.choice(_ALPHABET) for _ in range(length))


def looks_like_id(value: str | None) -> bool:
    """True when `value` could be an object id (1-64 of A-Z a-z 0-9 _ -). Anything else cannot name an
    object, so it is answered as "not found" without a query (and never reaches the database)."""
    return value is not None and _ID_SHAPE.fullmatch(value) is not None


def utcnow() -> datetime:
    """The current time, timezone-aware UTC."""
    return datetime.now(UTC)


@overload
def unix(ts: datetime) -> int: ...
@overload
def unix(ts: None) -> None: ...
def unix(ts: datetime | None) -> int | None:
    """Unix seconds of a datetime (naive values are read as UTC, as SQLite returns them)."""
    if ts is None:
        return None
    if ts.tzinfo is None:
        ts = ts.replace(tzinfo=UTC)
    return int(ts.timestamp())
