"""The single `lcsb` command: the trainer core's commands (train, import-gguf, estimate-memory,
gsm8k-to-chat, from `lcsb_core.cli`) plus the service client's `files` and `jobs` groups.

    lcsb train examples/gsm8k_lcsb.yaml                  # local training (lcsb_core)
    lcsb files upload train.jsonl                        # the service (LCSB_BASE_URL, LCSB_API_KEY)
    lcsb jobs submit job.yaml --follow
    python -m lcsb_client.main --help

`lcsb_core` stays free of the client: this module borrows its registered commands instead.
"""

from __future__ import annotations

import typer

from lcsb_client import files_cli, jobs_cli
from lcsb_core.cli import app as core_app

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="LCSB: LoRA fine-tuning with layer-cyclic selective backprop, locally (train, ...) "
                       "or on the fine-tuning service (files, jobs).")
app.registered_commands.extend(core_app.registered_commands)
app.add_typer(files_cli.app, name="files")
app.add_typer(jobs_cli.app, name="jobs")


def main() -> None:
    """Entry point of the `lcsb` script."""
    app()


if __name__ == "__main__":
    main()
