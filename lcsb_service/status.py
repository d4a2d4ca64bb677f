"""A job's status: the one enumeration of OpenAI's names used by the API, the database rows, the
worker's outcome and the metrics. Files are validated at upload, so jobs start `queued`. No
dependencies (the worker's training process and the API both import it).

    JobStatus.QUEUED == "queued"             # a str: stored, compared and serialized as its value
    JobStatus.SUCCEEDED in TERMINAL_STATUSES
"""

from __future__ import annotations

from enum import StrEnum


class JobStatus(StrEnum):
    """queued -> running -> succeeded | failed | cancelled (a queued job may also be cancelled or
    fail); the transitions are `lcsb_service.transitions`."""

    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"


TERMINAL_STATUSES = frozenset({JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELLED})
