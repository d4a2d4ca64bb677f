"""What every service command shares: the `--base-url` / `--api-key` options (or `LCSB_BASE_URL` /
`LCSB_API_KEY`), `--json`, opening the connection, and turning a `ClientError` into
`error (<code>): <message> [param]` on stderr with exit code 2 (no stack trace)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Annotated, ParamSpec, TypeVar

import typer

from lcsb_client.errors import ClientError
from lcsb_client.render import consoles, print_error
from lcsb_client.service import DEFAULT_BASE_URL, Service

P = ParamSpec("P")
R = TypeVar("R")
EXIT_API_ERROR = 2
EXIT_INTERRUPTED = 130

BaseUrl = Annotated[str, typer.Option("--base-url", envvar="LCSB_BASE_URL", show_default=True,
                                      help="the service's API root (ends in /v1)")]
ApiKey = Annotated[str | None, typer.Option("--api-key", envvar="LCSB_API_KEY", show_default=False,
                                            help="an API key of the service (sk-lcsb-...)")]
AsJson = Annotated[bool, typer.Option("--json", help="print the API's JSON object instead of a table")]


def connect(base_url: str, api_key: str | None) -> Service:
    """A Service for the command's options (raises ClientError `missing_api_key` without a key)."""
    return Service(base_url or DEFAULT_BASE_URL, api_key)


def reports_errors(command: Callable[P, R]) -> Callable[P, R]:
    """Wrap a command: a ClientError prints `error (<code>): <message> [param]` and exits 2; Ctrl-C
    exits 130 with one line."""

    @functools.wraps(command)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return command(*args, **kwargs)
        except ClientError as exc:
            print_error(consoles()[1], exc)
            raise typer.Exit(EXIT_API_ERROR) from None
        except KeyboardInterrupt:
            consoles()[1].print("interrupted")
            raise typer.Exit(EXIT_INTERRUPTED) from None

    return wrapper
