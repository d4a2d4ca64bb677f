"""The dashboard's pages over HTTP (no browser): each page is a shell with a strict
Content-Security-Policy, the vendored uPlot is served from the package, and a hostile path segment is
escaped."""

from __future__ import annotations

import re

import pytest

from api.ui.pages import UPLOT

PAGES = ["/ui/sign-in", "/ui/files", "/ui/jobs", "/ui/jobs/new", "/ui/jobs/ftjob-abc", "/ui/compare"]


@pytest.mark.parametrize("path", PAGES)
def test_pages_are_shells_with_a_strict_content_security_policy(client, path):
    r = client.get(path)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
    csp = dict(part.strip().split(" ", 1) for part in r.headers["content-security-policy"].split(";"))
    assert csp["default-src"] == "'none'" and csp["script-src"] == "'self'" and csp["style-src"] == "'self'"
    assert csp["connect-src"] == "'self'" and csp["frame-ancestors"] == "'none'" and csp["object-src"] == "'none'"
    assert "unsafe" not in r.headers["content-security-policy"]
    assert r.headers["x-content-type-options"] == "nosniff" and r.headers["referrer-policy"] == "no-referrer"
    assert r.headers["cache-control"] == "no-store"
    assert not re.search(r"<script(?![^>]*\bsrc=)", r.text)  # no inline script: every script is a file
    assert not re.search(r"\son[a-z]+=", r.text)  # no inline event handlers
    for src in re.findall(r'(?:src|href)="(/ui/static/[^"]+)"', r.text):
        assert client.get(src).status_code == 200, src


def test_a_hostile_job_id_in_the_path_is_not_rendered(client):
    r = client.get("/ui/jobs/%3Cimg%20src=x%20onerror=alert(1)%3E")
    assert r.status_code == 200 and 'data-job-id=""' in r.text and "<img" not in r.text


def test_the_root_redirects_to_jobs_and_uplot_is_vendored_with_its_license(client):
    r = client.get("/ui", follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == "/ui/jobs"
    js = client.get(f"/ui/static/vendor/{UPLOT}/uPlot.iife.min.js")
    assert js.status_code == 200 and len(js.content) > 40_000 and b"uPlot" in js.content
    assert client.get(f"/ui/static/vendor/{UPLOT}/LICENSE").text.startswith("The MIT License")
    assert UPLOT == "uplot-1.6.32"
