"""`lcsb jobs`: submit fine-tuning jobs from a YAML spec, list and inspect them, follow their progress,
cancel them, and download their outputs.

    lcsb jobs submit job.yaml --follow       # uploads training_path/validation_path first
    lcsb jobs submit dpo.yaml --method dpo --beta 0.2   # preference pairs (DPO)
    lcsb jobs list --metadata project=demo
    lcsb jobs get ftjob-...
    lcsb jobs follow ftjob-...               # progress bar; exit 0 succeeded, 1 failed/cancelled
    lcsb jobs cancel ftjob-...
    lcsb jobs download ftjob-... --out out/ --what adapter,metrics
    lcsb jobs checkpoints ftjob-... [--download ftckpt-...|STEP]
    lcsb jobs export ftjob-... --format adapter --format merged-f16 [--checkpoint STEP] --out gguf/
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated

import typer

from lcsb_client.common import ApiKey, AsJson, BaseUrl, connect, reports_errors
from lcsb_client.errors import ClientError
from lcsb_client.follow import follow_job
from lcsb_client.outputs import download_checkpoint, download_outputs, parse_what
from lcsb_client.render import (
    DownloadProgress,
    checkpoints_table,
    consoles,
    file_rejection,
    job_details,
    jobs_table,
    print_json,
)
from lcsb_client.service import DEFAULT_BASE_URL, Service
from lcsb_client.spec import JobSpec

app = typer.Typer(help="Submit, follow, cancel fine-tuning jobs and download their outputs.", no_args_is_help=True,
                  add_completion=False)
JobId = Annotated[str, typer.Argument(help="ftjob-...")]


def _print_job(job: dict, as_json: bool) -> None:
    out, _ = consoles()
    if as_json:
        print_json(out, job)
    else:
        out.print(job_details(job))


def _upload(svc: Service, path: Path, uploaded: list[str]) -> str:
    """Upload a dataset of the spec and append its id to `uploaded`; its id (a rejected file raises its
    reasons)."""
    _, err = consoles()
    f = svc.upload_file(path)
    uploaded.append(f["id"])
    if f.get("status") == "error":
        raise file_rejection(f)
    report = f.get("validation") or {}
    err.print(f"uploaded {path} as {f['id']} ({report.get('valid_examples', '?')} examples)", markup=False)
    return f["id"]


def _remove_uploads(svc: Service, file_ids: list[str]) -> None:
    """Delete the files a failed submit uploaded, saying so on stderr; a delete that fails is reported and
    does not hide the submit's own error."""
    _, err = consoles()
    for file_id in file_ids:
        try:
            svc.delete_file(file_id)
            err.print(f"removed {file_id}, uploaded by this submit", markup=False)
        except ClientError as exc:
            err.print(f"could not remove {file_id}, uploaded by this submit: {exc}", markup=False)


@app.command()
@reports_errors
def submit(spec: Annotated[Path, typer.Argument(exists=True, dir_okay=False, help="YAML job spec")],
           follow: Annotated[bool, typer.Option("--follow", "-f", help="then follow it to the end")] = False,
           set_: Annotated[list[str], typer.Option("--set", help="override a spec field, e.g. "
                                                  "--set hyperparameters.n_epochs=2")] = [],  # noqa: B006
           idempotency_key: Annotated[str | None, typer.Option(help="resubmitting with the same key returns "
                                                               "the same job")] = None,
           method: Annotated[str | None, typer.Option(
               "--method", help="method.type: supervised (the default) or dpo (a file of preference pairs)")] = None,
           beta: Annotated[float | None, typer.Option(
               "--beta", help="DPO's beta (method.dpo.hyperparameters.beta; default: the service's auto)")] = None,
           as_json: AsJson = False, base_url: BaseUrl = DEFAULT_BASE_URL, api_key: ApiKey = None) -> None:
    """Create a job from a YAML spec (local datasets are uploaded first); print it, or follow it. A
    submit that fails (a rejected dataset, a spec the service refuses) deletes the files it uploaded, so
    retrying leaves no stray uploads behind; files the spec names by id are never touched."""
    job_spec = JobSpec.load(spec, set_, method=method, beta=beta)
    with connect(base_url, api_key) as svc:
        uploaded: list[str] = []
        try:
            training = _upload(svc, job_spec.training_path, uploaded) if job_spec.training_path else None
            validation = _upload(svc, job_spec.validation_path, uploaded) if job_spec.validation_path else None
            job = svc.create_job(job_spec.to_request(training, validation), idempotency_key)
        except ClientError:
            _remove_uploads(svc, uploaded)
            raise
        _print_job(job, as_json)
        if follow:
            raise typer.Exit(follow_job(svc, job["id"], consoles()[1]))


def _metadata(items: list[str]) -> dict[str, str]:
    pairs = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ClientError("invalid_value", f"--metadata expects key=value, got {item!r}", "--metadata")
        pairs[key] = value
    return pairs


@app.command("list")
@reports_errors
def list_jobs(limit: Annotated[int, typer.Option(min=1, max=100)] = 20,
              after: Annotated[str | None, typer.Option(help="the last job id of the previous page")] = None,
              metadata: Annotated[list[str], typer.Option(help="only jobs with this metadata key=value "
                                                          "(repeatable)")] = [],  # noqa: B006
              as_json: AsJson = False, base_url: BaseUrl = DEFAULT_BASE_URL, api_key: ApiKey = None) -> None:
    """Your jobs, newest first."""
    out, err = consoles()
    with connect(base_url, api_key) as svc:
        jobs, has_more = svc.list_jobs(limit, after, _metadata(metadata))
    if as_json:
        print_json(out, {"data": jobs, "has_more": has_more})
        return
    out.print(jobs_table(jobs))
    if has_more:
        err.print(f"more: lcsb jobs list --after {jobs[-1]['id']}", markup=False)


@app.command("get")
@reports_errors
def get_job(job_id: JobId, as_json: AsJson = False, base_url: BaseUrl = DEFAULT_BASE_URL,
            api_key: ApiKey = None) -> None:
    """Status, settings, progress, memory estimate, result and error of one job."""
    with connect(base_url, api_key) as svc:
        _print_job(svc.get_job(job_id), as_json)


@app.command()
@reports_errors
def follow(job_id: JobId,
           after: Annotated[str | None, typer.Option(help="start after this event id (default: the first "
                                                     "event)")] = None,
           base_url: BaseUrl = DEFAULT_BASE_URL, api_key: ApiKey = None) -> None:
    """Follow a job's events with a progress bar until it ends: exit 0 succeeded, 1 failed or cancelled.
    Without a terminal, a progress line (step/total, loss, tokens/s, ETA) every 10 % of the steps or 30 s."""
    with connect(base_url, api_key) as svc:
        code = follow_job(svc, job_id, consoles()[1], after=after)
    raise typer.Exit(code)


@app.command()
@reports_errors
def cancel(job_id: JobId, as_json: AsJson = False, base_url: BaseUrl = DEFAULT_BASE_URL,
           api_key: ApiKey = None) -> None:
    """Cancel a queued or running job (a running one stops within one training step)."""
    out, _ = consoles()
    with connect(base_url, api_key) as svc:
        job = svc.cancel_job(job_id)
    if as_json:
        print_json(out, job)
    else:
        out.print(f"{job['id']} {job['status']}", markup=False)


@app.command()
@reports_errors
def download(job_id: JobId,
             out: Annotated[Path | None, typer.Option("--out", "-o", file_okay=False,
                                                      help="folder to write to (default ./<job id>)")] = None,
             what: Annotated[str, typer.Option(help="comma-separated: adapter, selection_history, metrics, plots, "
                                               "summary, config, eval_samples, all")] = "all",
             base_url: BaseUrl = DEFAULT_BASE_URL, api_key: ApiKey = None) -> None:
    """Download a finished job's outputs; the adapter is unpacked to <out>/adapter/ (PEFT folder)."""
    kinds = parse_what(what)
    stdout, err = consoles()
    out_dir = out or Path(job_id)
    with connect(base_url, api_key) as svc, DownloadProgress(err) as progress:
        written = download_outputs(svc, job_id, out_dir, kinds, progress.track)
    for path in written:
        stdout.print(f"{path}{'/' if path.is_dir() else ''}", markup=False)


@app.command()
@reports_errors
def checkpoints(job_id: JobId,
                download: Annotated[str | None, typer.Option("--download", help="a checkpoint id or step number: "
                                                             "unpack its adapter to <out>/step-<N>/")] = None,
                out: Annotated[Path | None, typer.Option("--out", "-o", file_okay=False,
                                                         help="folder for --download (default ./<job id>)")] = None,
                as_json: AsJson = False, base_url: BaseUrl = DEFAULT_BASE_URL, api_key: ApiKey = None) -> None:
    """A job's checkpoints, latest first (step, losses, size); `--download` fetches one's adapter."""
    stdout, err = consoles()
    with connect(base_url, api_key) as svc:
        rows = svc.list_checkpoints(job_id)
        if download is None:
            if as_json:
                print_json(stdout, rows)
            else:
                stdout.print(checkpoints_table(rows))
            return
        chosen = next((c for c in rows if download in (c["id"], str(c["step_number"]))), None)
        if chosen is None:
            raise ClientError("checkpoint_not_found", f"job {job_id} has no checkpoint {download!r} (steps: "
                              f"{', '.join(str(c['step_number']) for c in rows) or 'none'})", "--download")
        with DownloadProgress(err) as progress:
            folder = download_checkpoint(svc, job_id, chosen, out or Path(job_id), progress.track)
    stdout.print(f"{folder}/", markup=False)


@app.command("export")
@reports_errors
def export(job_id: JobId,
           format_: Annotated[list[str] | None, typer.Option("--format", "-f", help="adapter, merged-f16, merged-q8_0, "
                                                            "merged-q4_1 (repeat; default the first three)")] = None,
           checkpoint: Annotated[int | None, typer.Option("--checkpoint", min=1,
                                                          help="export this checkpoint step's adapter")] = None,
           out: Annotated[Path | None, typer.Option("--out", "-o", file_okay=False,
                                                    help="folder to write to (default ./<job id>-<export id>)")] = None,
           wait_s: Annotated[float, typer.Option("--wait", min=1, help="seconds to wait for the worker")] = 900,
           as_json: AsJson = False, base_url: BaseUrl = DEFAULT_BASE_URL, api_key: ApiKey = None) -> None:
    """Export a succeeded job's adapter to GGUF (llama.cpp) and an Ollama Modelfile, wait for the worker,
    and download the files."""
    stdout, err = consoles()
    with connect(base_url, api_key) as svc:
        export = svc.create_export(job_id, format_ or None, checkpoint)
        err.print(f"export {export['id']} queued", markup=False)
        deadline = time.monotonic() + wait_s
        while export["status"] in ("queued", "running"):
            if time.monotonic() > deadline:
                raise ClientError("timeout", f"export {export['id']} is still {export['status']} after {wait_s:.0f} s "
                                  f"(GET .../exports/{export['id']} later)", "--wait")
            time.sleep(1.0)
            export = svc.get_export(job_id, export["id"])
        if export["status"] != "succeeded":
            error = export.get("error") or {}
            raise ClientError(error.get("code") or "export_failed", error.get("message") or "the export failed", None)
        folder = out or Path(f"{job_id}-{export['id']}")
        with DownloadProgress(err) as progress:
            for f in export["files"]:
                svc.download(svc.job_path(job_id, "exports", export["id"], "files", f["name"]), folder / f["name"],
                             progress.track(f["name"], f["bytes"]))
    if as_json:
        print_json(stdout, export)
        return
    for f in export["files"]:
        kept = f"  effect kept {f['effect_kept']:.1%}" if f.get("effect_kept") is not None else ""
        stdout.print(f"{folder / f['name']}{kept}", markup=False)
