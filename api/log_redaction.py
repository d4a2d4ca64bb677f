"""Keep API keys out of the logs. A key sent in the query string (`?api_key=sk-lcsb-...`, as some
clients and copied curl commands do) is refused (401: keys go in `Authorization: Bearer`), but
uvicorn's access log writes every request target verbatim, so the key would sit in log files and log
shippers. `install()` (called by the app factory) adds `RedactSecrets` to the `uvicorn.access` logger:
the value of every query parameter whose name looks like a credential (`api_key`, `key`, `token`,
`access_token`, `secret`, `password`, `auth...`, `signature`) and anything shaped like a key
(`sk-...`) anywhere in the target becomes `REDACTED`.

    redact_target("/v1/files?limit=5&api_key=sk-lcsb-abc")  ->  "/v1/files?limit=5&api_key=REDACTED"
"""

from __future__ import annotations

import logging
import re
from urllib.parse import unquote_plus

REDACTED = "REDACTED"
ACCESS_LOGGER = "uvicorn.access"
_SECRET_NAME = re.compile(r"key|token|secret|passw|auth|signature|credential", re.IGNORECASE)
_KEY_SHAPED = re.compile(r"sk-[A-Za-z0-9_\-]{8,}")  # this service's keys (sk-lcsb-...) and OpenAI's


def redact_target(target: str) -> str:
    """A request target (path and query string, as uvicorn logs it) with credentials replaced."""
    path, sep, query = target.partition("?")
    path = _KEY_SHAPED.sub(REDACTED, path)
    if not sep:
        return path
    items = []
    for item in query.split("&"):
        name, eq, value = item.partition("=")
        if eq and (_SECRET_NAME.search(unquote_plus(name)) or _KEY_SHAPED.search(unquote_plus(value))):
            value = REDACTED
        items.append(_KEY_SHAPED.sub(REDACTED, f"{name}{eq}{value}"))
    return f"{path}?{'&'.join(items)}"


class RedactSecrets(logging.Filter):
    """A logging filter that redacts credentials in a record's string arguments (uvicorn's access log
    passes the target as one) and, for a record without arguments, in its message. Never drops a record."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple) and record.args:
            record.args = tuple(redact_target(a) if isinstance(a, str) else a for a in record.args)
        elif not record.args and isinstance(record.msg, str):
            record.msg = redact_target(record.msg)
        return True


def install(logger_name: str = ACCESS_LOGGER) -> None:
    """Add `RedactSecrets` to the logger once (the factory may build several apps in one process)."""
    logger = logging.getLogger(logger_name)
    if not any(isinstance(f, RedactSecrets) for f in logger.filters):
        logger.addFilter(RedactSecrets())
