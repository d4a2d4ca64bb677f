"""The API side of cursor pages (OpenAI's style): the `limit` and `after` query parameters and the
list body. The queries are `lcsb_service.pagination`.

    def list_things(limit: LimitQuery = 20, after: AfterQuery = None) -> dict:
        rows, has_more = service_function(..., after=after, limit=limit)
        return page([ThingObject.of(r) for r in rows], has_more)
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Query

LimitQuery = Annotated[int, Query(ge=1, le=100, description="items per page (1-100)")]
AfterQuery = Annotated[str | None, Query(max_length=64, description="id of the last item of the previous page")]


def page(items: list[Any], has_more: bool) -> dict:
    """The OpenAI list body for already-serialized items (each with an `id`)."""
    return {"object": "list", "data": items, "has_more": has_more,
            "first_id": items[0].id if items else None, "last_id": items[-1].id if items else None}
