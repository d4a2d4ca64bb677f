"""Keyset (cursor) pagination in OpenAI's style, on the query side: `after=<id>` returns the items
that follow that object in the list's order; `limit` items at most; `has_more` says whether another
page exists. The API's query parameters and list body are `api.pagination`.

    rows, has_more = keyset_page(session, stmt, sort=(Job.created_at, Job.id), cursor=after_row,
                                 limit=limit, descending=True)
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Select, and_, or_
from sqlalchemy.orm import Session

from lcsb_service.errors import InvalidRequest
from lcsb_service.ids import looks_like_id


def after_condition(sort: tuple, values: tuple, descending: bool) -> Any:
    """Rows strictly after `values` in the order of the `sort` columns (lexicographic)."""
    clauses = []
    for i, column in enumerate(sort):
        equal = [sort[j] == values[j] for j in range(i)]
        beyond = column < values[i] if descending else column > values[i]
        clauses.append(and_(*equal, beyond))
    return or_(*clauses)


def keyset_page(session: Session, stmt: Select, *, sort: tuple, cursor: tuple | None, limit: int,
                descending: bool = True) -> tuple[list[Any], bool]:
    """Run `stmt` ordered by `sort` from after `cursor` (the sort values of the `after` item).
    Returns (rows, has_more)."""
    if cursor is not None:
        stmt = stmt.where(after_condition(sort, cursor, descending))
    order = [c.desc() for c in sort] if descending else [c.asc() for c in sort]
    rows = list(session.execute(stmt.order_by(*order).limit(limit + 1)).scalars())
    return rows[:limit], len(rows) > limit


def cursor_row(session: Session, model: type, after: str, **scope: Any) -> Any:
    """The row named by `after` within `scope` (column=value filters, e.g. owner_id or job_id).

    Raises:
        InvalidRequest: no such row in this list (code `invalid_cursor`).
    """
    row = session.get(model, after) if looks_like_id(after) else None
    if row is None or any(getattr(row, k) != v for k, v in scope.items()):
        raise missing_cursor(after)
    return row


def missing_cursor(after: str) -> InvalidRequest:
    """The error for an `after` id that is not in this list."""
    return InvalidRequest(f"after: no item {after!r} in this list", code="invalid_cursor", param="after")
