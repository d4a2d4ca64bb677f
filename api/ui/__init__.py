"""The web dashboard under `/ui`: server-rendered page shells (Jinja2) whose scripts call the same
`/v1` endpoints as every client, with the API key the user signed in with, kept in the tab's
`sessionStorage` (never in a URL, a cookie or a log). Charts use the vendored uPlot
(`static/vendor/`); nothing is loaded from a CDN and nothing is built with Node.

    install(app)    # api.main: the pages under /ui, the static files under /ui/static
"""

from __future__ import annotations

from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles

from api.ui.pages import STATIC_DIR, router


def install(app: FastAPI) -> None:
    """Mount the dashboard's pages and static files (imports no torch)."""
    app.include_router(router)
    app.mount("/ui/static", StaticFiles(directory=STATIC_DIR), name="ui-static")
