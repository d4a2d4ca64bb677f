"""The single `lcsb` command: the service client's `files` and `jobs` groups, plus the trainer core's
commands (train, import-gguf, base-gguf, export, estimate-memory, gsm8k-to-chat, from `lcsb_core.cli`) when the core is
installed.

    lcsb files upload train.jsonl                        # the service (LCSB_BASE_URL, LCSB_API_KEY)
    lcsb jobs submit job.yaml --follow
    lcsb chat ft:SmolLM2-135M-Instruct:alice::ftjob-... --message "Hi"   # streamed answer
    lcsb train examples/gsm8k_lcsb.yaml                  # local training (needs the `train` extra)
    python -m lcsb_client.main --help

The client installs without torch (`pip install lcsb-service`, or `lcsb-service[client]`); the core's
commands need `pip install "lcsb-service[train]"`. Without it they are still listed, and say so.
`lcsb_core` stays free of the client: this module borrows its registered commands instead.
"""

from __future__ import annotations

import importlib.util
import io
import sys

import typer

from lcsb_client import chat_cli, files_cli, jobs_cli

CORE_COMMANDS = ("train", "import-gguf", "base-gguf", "export", "estimate-memory", "gsm8k-to-chat")
CORE_MODULES = ("torch", "transformers", "peft")   # what the `train` extra brings
INSTALL_CORE = 'pip install "lcsb-service[train]"'

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="LCSB: LoRA fine-tuning with layer-cyclic selective backprop, locally (train, ...) "
                       "or on the fine-tuning service (files, jobs, chat).")
app.add_typer(files_cli.app, name="files")
app.add_typer(jobs_cli.app, name="jobs")
app.command("chat")(chat_cli.chat)


def core_installed() -> bool:
    """Whether the trainer core's dependencies (the `train` extra) are importable."""
    return all(importlib.util.find_spec(name) is not None for name in CORE_MODULES)


def _needs_core(name: str) -> None:
    """Register `name` as a command that says how to install the core (exit 2)."""

    @app.command(name, help=f"Needs the trainer core: {INSTALL_CORE}", add_help_option=False,
                 context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
    def missing(ctx: typer.Context) -> None:
        typer.echo(f"error: `lcsb {name}` runs the trainer core, which is not installed here (the client "
                   f"alone talks to a service); install it with: {INSTALL_CORE}", err=True)
        raise typer.Exit(2)


if core_installed():
    from lcsb_core.cli import app as core_app

    app.registered_commands.extend(core_app.registered_commands)
else:
    for _name in CORE_COMMANDS:
        _needs_core(_name)


def tolerate_unencodable_output() -> None:
    """Write `?` for characters stdout/stderr cannot encode instead of raising: a Windows pipe, `LC_ALL=C`
    or `PYTHONIOENCODING=ascii` cannot encode `données-日本.jsonl`, and a traceback after `files upload`
    has uploaded would make the user upload it again. The streams' encoding stays as it is (what the
    terminal or pipe reads); only their error handler changes (`strict`, or `surrogateescape` under the
    C locale, which fails on any other character)."""
    for stream in (sys.stdout, sys.stderr):
        if isinstance(stream, io.TextIOWrapper) and stream.errors in ("strict", "surrogateescape"):
            stream.reconfigure(errors="replace")


def main() -> None:
    """Entry point of the `lcsb` script."""
    tolerate_unencodable_output()
    app()


if __name__ == "__main__":
    main()
