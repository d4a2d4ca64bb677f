"""The dashboard's pages. Each is a shell rendered by Jinja2 (autoescaped); its script fills it from
`/v1` in the browser. The server never sees the user's key on these routes, so a page knows nothing of
its owner: a missing job and another owner's job both come back 404 from `/v1` and show the same
not-found message.

Every page carries a Content-Security-Policy that allows scripts, styles and connections from this
origin only (no inline script, no `eval`), no framing, no plugins, and `Referrer-Policy: no-referrer`.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated

from fastapi import APIRouter, Request
from fastapi import Path as PathParam
from fastapi.responses import HTMLResponse, RedirectResponse
from fastapi.templating import Jinja2Templates

from lcsb_core.training.config import DPO_DEFAULT_BETA
from lcsb_core.training.default_schedule import AUTO
from lcsb_core.training.schedules import DEFAULT_FRACTION, SCHEDULES, LCSBSettings, schedule_takes

HERE = Path(__file__).resolve().parent
STATIC_DIR = HERE / "static"
UPLOT = "uplot-1.6.32"  # the vendored uPlot folder under static/vendor (README there: version, license)
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data: blob:; connect-src 'self'; "
       "font-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'; object-src 'none'")
SECURITY_HEADERS = {"Content-Security-Policy": CSP, "X-Content-Type-Options": "nosniff",
                    "Referrer-Policy": "no-referrer", "X-Frame-Options": "DENY", "Cache-Control": "no-store"}
_JOB_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")

templates = Jinja2Templates(directory=HERE / "templates")
router = APIRouter(prefix="/ui", include_in_schema=False)


def _page(request: Request, template: str, title: str, **context) -> HTMLResponse:
    return templates.TemplateResponse(request, template, {"title": title, "uplot": UPLOT, **context},
                                      headers=SECURITY_HEADERS)


@router.get("")
@router.get("/")
def home() -> RedirectResponse:
    return RedirectResponse("/ui/jobs", status_code=303)


@router.get("/sign-in")
def sign_in(request: Request) -> HTMLResponse:
    return _page(request, "sign_in.html", "Sign in", page="sign-in")


@router.get("/files")
def files(request: Request) -> HTMLResponse:
    return _page(request, "files.html", "Files", page="files")


@router.get("/jobs")
def jobs(request: Request) -> HTMLResponse:
    return _page(request, "jobs.html", "Jobs", page="jobs")


@router.get("/jobs/new")
def new_job(request: Request) -> HTMLResponse:
    return _page(request, "new_job.html", "New job", page="new-job", schedules=(AUTO, *SCHEDULES),
                 default_beta=f"{DPO_DEFAULT_BETA:g}",
                 default_schedule=LCSBSettings().schedule, default_fraction=f"{DEFAULT_FRACTION:g}",
                 full_every_schedules=[n for n in SCHEDULES if schedule_takes("full_every", n)])


@router.get("/jobs/{job_id}")
def job(request: Request, job_id: Annotated[str, PathParam(max_length=64)]) -> HTMLResponse:
    """A job's page; an id that cannot be one shows the same not-found message as a foreign one."""
    return _page(request, "job.html", "Job", page="job", job_id=job_id if _JOB_ID.fullmatch(job_id) else "")


@router.get("/playground")
def playground(request: Request) -> HTMLResponse:
    """Chat with a fine-tuned model and its base side by side (`?model=<id>` preselects one)."""
    return _page(request, "playground.html", "Playground", page="playground")


@router.get("/compare")
def compare(request: Request) -> HTMLResponse:
    return _page(request, "compare.html", "Compare", page="compare")
