"""`lcsb files`: upload a dataset (validated by the service) and look at uploaded files.

    lcsb files upload train.jsonl            # prints the file and its validation summary; exit 2 if rejected
    lcsb files list
    lcsb files get file-...
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from lcsb_client.common import ApiKey, AsJson, BaseUrl, connect, reports_errors
from lcsb_client.render import consoles, file_rejection, file_summary, print_json, status_text, when
from lcsb_client.service import DEFAULT_BASE_URL

app = typer.Typer(help="Upload and inspect datasets.", no_args_is_help=True, add_completion=False)


def _show(f: dict, as_json: bool) -> None:
    """Print a file object; a file that failed validation then raises its rejection (exit 2)."""
    out, _ = consoles()
    if as_json:
        print_json(out, f)
    else:
        out.print(file_summary(f))
    if f.get("status") == "error":
        raise file_rejection(f)


@app.command()
@reports_errors
def upload(path: Annotated[Path, typer.Argument(
               exists=True, dir_okay=False, readable=True,
               help="a JSONL dataset (chat, prompt/completion, text, or preference pairs for DPO) or .txt")],
           as_json: AsJson = False, base_url: BaseUrl = DEFAULT_BASE_URL, api_key: ApiKey = None) -> None:
    """Upload a dataset for fine-tuning and print its validation report (exit 2 when rejected)."""
    with connect(base_url, api_key) as svc:
        f = svc.upload_file(path)
    _show(f, as_json)


@app.command("get")
@reports_errors
def get_file(file_id: Annotated[str, typer.Argument(help="file-...")], as_json: AsJson = False,
             base_url: BaseUrl = DEFAULT_BASE_URL, api_key: ApiKey = None) -> None:
    """Show one file and its validation report (exit 2 when it was rejected)."""
    with connect(base_url, api_key) as svc:
        f = svc.get_file(file_id)
    _show(f, as_json)


@app.command("list")
@reports_errors
def list_files(limit: Annotated[int, typer.Option(min=1, max=100)] = 20, as_json: AsJson = False,
               base_url: BaseUrl = DEFAULT_BASE_URL, api_key: ApiKey = None) -> None:
    """The most recent files."""
    out, _ = consoles()
    with connect(base_url, api_key) as svc:
        files = svc.list_files(limit)
    if as_json:
        print_json(out, files)
        return
    table = Table(box=None, header_style="bold", pad_edge=False)
    for name in ("id", "filename", "bytes", "status", "purpose", "created"):
        table.add_column(name, no_wrap=name != "filename", overflow="fold")
    for f in files:
        table.add_row(f["id"], f.get("filename", ""), f"{f.get('bytes', 0):,}", status_text(f.get("status")),
                      f.get("purpose", ""), when(f.get("created_at")))
    out.print(table)
