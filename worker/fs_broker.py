"""The embedded default's broker: kombu's filesystem transport with messages written atomically.

kombu's `filesystem.Channel._put` (5.7.0) creates the message file under its final name, then locks it
and writes; `_get` moves the first matching file away and reads it without taking that lock. A consumer
that lists the folder between the producer's `open` and its `write` moves an empty file: the worker
fails to parse it (`JSONDecodeError`, "Unrecoverable error", the worker process exits) and the message
is lost. Seen here with 20 concurrent chat requests on one inference worker
(bench/serving_concurrency.py); kombu's issue celery/kombu#1551 reports the same error, still open.

`AtomicFilesystemTransport` writes each message under a name `_get` skips (`<name>.msg.tmp`: its part
after the first '.' is not `<queue>.msg`) and renames it into place (`os.replace`, atomic within one
filesystem), so a consumer sees a message whole or not at all. Everything else is kombu's.

    Celery(..., broker="filesystem://").conf.broker_transport = TRANSPORT   # worker.app does this
"""

from __future__ import annotations

import os
import uuid
from typing import Any

from kombu.exceptions import ChannelError
from kombu.transport import filesystem
from kombu.utils.json import dumps

TRANSPORT = "worker.fs_broker:AtomicFilesystemTransport"
"""The `broker_transport` (kombu's "module:Class" form) that selects this transport."""


class AtomicChannel(filesystem.Channel):
    """kombu's filesystem channel whose `_put` writes a temporary file and renames it into place."""

    def _put(self, queue: str, payload: Any, **kwargs: Any) -> None:  # type: ignore[override]  # kombu's own signature
        """Put `payload` onto `queue` as one file that appears whole (see the module doc).

        Raises:
            ChannelError: the folder cannot be written (kombu's error, as its own `_put` raises).
        """
        name = f"{int(round(filesystem.monotonic() * 1000))}_{uuid.uuid4()}.{queue}.msg"
        final = os.path.join(self.data_folder_out, name)
        tmp = final + ".tmp"
        try:
            with open(tmp, "wb") as f:
                f.write(dumps(payload).encode())
            os.replace(tmp, final)
        except OSError as exc:
            raise ChannelError(f"Cannot add file {name!r} to the broker folder") from exc


class AtomicFilesystemTransport(filesystem.Transport):
    """kombu's filesystem transport with `AtomicChannel`."""

    Channel = AtomicChannel
