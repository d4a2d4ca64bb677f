"""Unknown query parameters are refused, never ignored: `GET /v1/fine_tuning/jobs?status=succeeded` would
otherwise list every job, and `?order=asc` newest first. `reject_unknown_query` is a dependency of every
`/v1` router (`api.main`); it answers 400 `unknown_parameter` naming the parameter and the ones the route
takes. A route that reads parameters beyond its declared ones from the request (the jobs list's
`metadata[<key>]`) names them with `takes_query`. A request without an `Authorization` header is left
to authentication (401 "send 'Authorization: Bearer <key>'"), the answer a key sent as `?api_key=` needs.

    @router.get("")
    @takes_query(re.compile("metadata"), "metadata[<key>]")     # matched at the name's start
    def list_jobs(request: Request, ...) -> dict: ...
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, TypeVar

from fastapi import Request
from fastapi.dependencies.models import Dependant

from lcsb_service.errors import InvalidRequest

F = TypeVar("F", bound=Callable[..., Any])
_EXTRA = "__lcsb_query__"  # endpoint attribute: (pattern, shown name)


def takes_query(pattern: re.Pattern[str], shown: str) -> Callable[[F], F]:
    """Mark an endpoint as reading the query parameters that match `pattern` itself (`shown` is how the
    error lists them). Apply below the router decorator."""

    def mark(endpoint: F) -> F:
        setattr(endpoint, _EXTRA, (pattern, shown))
        return endpoint

    return mark


def _declared(dependant: Dependant) -> set[str]:
    names = {p.alias for p in dependant.query_params}
    for sub in dependant.dependencies:
        names |= _declared(sub)
    return names


_TAKES: dict[int, tuple[Any, tuple[frozenset[str], re.Pattern[str] | None, str]]] = {}  # id -> (route, takes)


def _takes(route: Any) -> tuple[frozenset[str], re.Pattern[str] | None, str]:
    """(declared names, extra pattern, the names as an error lists them) of a route; cached per route
    (routes are not hashable; the entry keeps its route, so the id is not reused)."""
    cached = _TAKES.get(id(route))
    if cached is not None and cached[0] is route:
        return cached[1]
    names = frozenset(_declared(route.dependant)) if hasattr(route, "dependant") else frozenset()
    pattern, shown = getattr(getattr(route, "endpoint", None), _EXTRA, (None, ""))
    listed = ", ".join([*sorted(names), *([shown] if shown else [])]) or "no query parameters"
    _TAKES[id(route)] = (route, (names, pattern, listed))
    return names, pattern, listed


async def reject_unknown_query(request: Request) -> None:
    """Refuse a query parameter the matched route does not take.

    Raises:
        InvalidRequest: code `unknown_parameter`, `param` the first unknown name.
    """
    route = request.scope.get("route")
    if route is None or "authorization" not in request.headers:
        return  # every /v1 route authenticates: its 401 says where a key sent as `?api_key=` belongs
    names, pattern, listed = _takes(route)
    for name in request.query_params:
        if name not in names and not (pattern is not None and pattern.match(name)):
            shown = name if len(name) <= 64 else name[:61] + "..."
            raise InvalidRequest(f"unknown query parameter {shown!r}; {request.method} {route.path_format} "
                                 f"takes {listed}", code="unknown_parameter", param=shown)
