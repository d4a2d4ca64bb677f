"""Create fine-tuning jobs: check the files and the model, build the spec (`jobspec`), insert the row
`queued` with its first events, and send it to its queue after the commit. Idempotent per
(owner, `Idempotency-Key`): the same key with the same body returns the first job; with a different
body it is refused (409).

    job, created = create_job(session, settings, enqueuer, owner_id=..., request=body, idempotency_key=k)
    jobs, has_more = list_jobs(session, owner_id, metadata=[("team", "a")], after=None, limit=20)
"""

from __future__ import annotations

import secrets
from collections.abc import Iterable
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from lcsb_core.chat_tokens import no_chat_template_message
from lcsb_core.data.formats import CHAT, PREFERENCE, PREFERENCE_FORMATS, PROMPT_COMPLETION, SUPERVISED_FORMATS, TEXT
from lcsb_core.data.run_length import planned_steps
from lcsb_service.catalog import ModelInfo, find_model
from lcsb_service.enqueue import Enqueuer, enqueue_after_commit
from lcsb_service.errors import Conflict, InvalidRequest
from lcsb_service.events import add_event
from lcsb_service.files import FINE_TUNE
from lcsb_service.hyperparameters import DPO, SUPERVISED, merged_hyperparameters, method_type
from lcsb_service.ids import looks_like_id, new_id, utcnow
from lcsb_service.jobspec import build_spec, request_hash
from lcsb_service.lineage import find_parent, inherit_shape
from lcsb_service.models import File, Job
from lcsb_service.pagination import cursor_row, keyset_page
from lcsb_service.settings import Settings
from lcsb_service.status import JobStatus


def usable_file(session: Session, owner_id: str, file_id: str, param: str) -> File:
    """The owner's dataset `file_id`, validated and of purpose fine-tune.

    Raises:
        InvalidRequest: unknown or foreign id (`file_not_found`), wrong purpose, or a file that failed
            validation (`invalid_file`, with the validator's summary).
    """
    row = session.get(File, file_id) if looks_like_id(file_id) else None
    if row is None or row.owner_id != owner_id:
        raise InvalidRequest(f"{param}: no such file {file_id!r}", code="file_not_found", param=param)
    if row.purpose != FINE_TUNE:
        raise InvalidRequest(f"{param}: file {file_id} has purpose {row.purpose!r}, not {FINE_TUNE!r}",
                             code="invalid_file", param=param)
    if row.status != "processed":
        raise InvalidRequest(f"{param}: file {file_id} failed validation: {row.status_details}",
                             code="invalid_file", param=param)
    return row


def check_example_count(row: File, minimum: int, param: str = "training_file") -> None:
    """Refuse a training file with fewer valid examples than a job needs (`Settings.min_examples`, 10 as
    OpenAI's API); uploads accept any count, as OpenAI's do. A `.txt` corpus, counted only with the model's
    tokenizer, is left to the worker's own check.

    Raises:
        InvalidRequest: `invalid_file` naming `param`, the file and both counts.
    """
    count = upload_examples(row)
    if count is not None and count < minimum:
        raise InvalidRequest(f"{param}: {row.id} has {count} valid example{'' if count == 1 else 's'}; a "
                             f"fine-tuning job needs at least {minimum}", code="invalid_file", param=param)


def upload_examples(row: File) -> int | None:
    """The training examples an uploaded JSONL file holds (its stored validation report's valid
    examples: what the run's length is computed from at creation); None for a `.txt` corpus, whose
    examples are packed blocks that only the model's tokenizer can count."""
    report = row.validation or {}
    count = report.get("valid_examples")
    return count if report.get("file_type") == "jsonl" and isinstance(count, int) and count > 0 else None


_FORMAT_WORDS = {CHAT: "chat data", PROMPT_COMPLETION: "prompt/completion data", TEXT: "a text corpus",
                 PREFERENCE: "preference pairs"}
_EXPECTED = {DPO: ("preference pairs ({\"input\", \"preferred_output\", \"non_preferred_output\"} lines)",
                   PREFERENCE_FORMATS),
             SUPERVISED: ("chat, prompt/completion or text data (a preference file needs method.type dpo)",
                            SUPERVISED_FORMATS)}


def file_format(row: File) -> str | None:
    """The format the upload's validation recorded (`lcsb_core.data.formats`: chat, prompt_completion,
    text, preference), or None when it recorded none."""
    return (row.validation or {}).get("format")


def check_file_format(row: File | None, kind: str, param: str) -> None:
    """A job's training or validation file must hold its method's data: preference pairs for a `dpo`
    job, a supervised format (chat, prompt/completion, text) for a `supervised` one. A file whose upload
    recorded no format is left to the worker's check.

    Raises:
        InvalidRequest: `invalid_file` naming `param`, the format found and the one expected.
    """
    found = file_format(row) if row is not None else None
    expected, formats = _EXPECTED[kind]
    if row is None or found is None or found in formats:
        return
    raise InvalidRequest(f"{param}: {row.id} is {_FORMAT_WORDS.get(found, found + ' data')}; a {kind} job needs "
                         f"{expected}", code="invalid_file", param=param)


def _check_graded_source(valid: File | None, eval_file: File | None) -> None:
    """Graded evaluation (`method.eval`) takes its prompts and references from `eval_file`, or without
    one from the validation file: that file must hold chat or prompt/completion lines (a text corpus
    has no references; a DPO job's preference validation file is not read for prompts, so it needs an
    eval_file). The trainer's config checks that a validation file is given at all.

    Raises:
        InvalidRequest: naming `method.eval.eval_file`, or `method.eval` for a text or preference validation file.
    """
    source, param = (eval_file, "method.eval.eval_file") if eval_file is not None else (valid, "method.eval")
    found = file_format(source) if source is not None else None
    if source is None or found not in (TEXT, PREFERENCE):
        return
    where = f"eval_file {source.id}" if eval_file is not None else f"the validation file {source.id}"
    why = "a text corpus, which has no references to grade against" if found == TEXT else \
        "preference pairs, which graded evaluation does not read"
    raise InvalidRequest(f"{param}: {where} is {why}; give an eval_file of chat or prompt/completion lines",
                         code="invalid_file", param=param)


def base_model(settings: Settings, request: dict[str, Any]) -> ModelInfo:
    """The installed base model `request["model"]` names (after `lineage.inherit_shape`, a continued
    job's root base).

    Raises:
        InvalidRequest: no such base model (`model_not_found`).
    """
    model = find_model(settings.resolved_model_dirs, request["model"])
    if model is None:
        raise InvalidRequest(f"model {request['model']!r} is not available; GET /v1/models lists the base models",
                             code="model_not_found", param="model")
    return model


def _existing(session: Session, owner_id: str, key: str, digest: str) -> Job | None:
    job = session.execute(select(Job).where(Job.owner_id == owner_id, Job.idempotency_key == key)).scalar_one_or_none()
    if job is not None and job.request_hash != digest:
        raise Conflict("this Idempotency-Key was used with a different request body", code="idempotency_key_reused",
                       param="Idempotency-Key")
    return job


def _validated_event(session: Session, job_id: str, role: str, row: File) -> None:
    """"Validated training file: file-... (12 examples, format chat)", plus the upload's warnings (keys
    that training ignores, with their lines; special-token text; ...) at level warn."""
    report = row.validation or {}
    warnings = list(report.get("warnings") or [])
    counts = f" ({report['valid_examples']} examples, format {report['format']})" if report else ""
    add_event(session, job_id, f"Validated {role} file: {row.id}{counts}" + "".join(f"; {w}" for w in warnings),
              level="warn" if warnings else "info",
              data={"file": row.id, "warnings": warnings, "ignored_keys": report.get("ignored_keys") or {}})


def _epochs_auto(request: dict[str, Any]) -> bool:
    """Whether the request left `n_epochs` to "auto" (missing counts as auto)."""
    return merged_hyperparameters(request).get("n_epochs", "auto") == "auto"


def _run_length(spec, train: File, epochs_auto: bool) -> str:  # a JobSpec
    """"12 optimizer steps (45 examples, batch size 4, 3 epoch(s) (auto))", or, where `max_steps` is what
    ends the run, "3 optimizer steps (40 examples, batch size 4; max_steps 3 ends it before its 3 epoch(s)
    (auto))", or why the count waits for the worker."""
    hp = spec.hyperparameters
    if spec.total_steps is None:
        return "optimizer steps counted once the worker has tokenized the corpus"
    epochs = f"{hp['n_epochs']} epoch(s)" + (" (auto)" if epochs_auto else "")
    max_steps, tc, examples = hp.get("max_steps"), spec.train_config, upload_examples(train)
    head = f"{spec.total_steps} optimizer steps ({examples} examples, batch size {hp['batch_size']}"
    if max_steps and examples and tc.get("epochs") is not None and spec.total_steps < planned_steps(
            examples, tc["batch_size"], tc.get("gradient_accumulation_steps", 1), tc["epochs"], None):
        return f"{head}; max_steps {max_steps} ends it before its {epochs} do)"
    return f"{head}, {epochs}" + (f"; max_steps {max_steps} not reached" if max_steps else "") + ")"


def create_job(session: Session, settings: Settings, enqueuer: Enqueuer, *, owner_id: str,
               request: dict[str, Any], idempotency_key: str | None = None) -> tuple[Job, bool]:
    """Create (or, for a repeated idempotency key, return) a job. `request` is the create body as plain
    JSON data. Returns (job, created). The caller commits; the job is enqueued after that commit.

    A `model` that is one of the owner's `ft:` models or checkpoints continues it (`lcsb_service.lineage`):
    the job trains the parent's base (`model`), shape and quantization from its LoRA weights and records
    `parent_model` / `parent_job_id`.

    Raises:
        InvalidRequest: unknown base model, unusable file, chat data for a model without a chat template,
            out-of-range values, a LoRA shape or quantization other than a parent model's (400).
        NotFound: an `ft:` model that is not the owner's (404 `model_not_found`).
        Unprocessable: no worker class can hold the estimated peak memory (422).
        Conflict: the idempotency key was used with another body; the `ft:` model's job has not
            succeeded (409).
    """
    digest = request_hash(request)
    if idempotency_key and (job := _existing(session, owner_id, idempotency_key, digest)) is not None:
        return job, False
    parent = find_parent(session, owner_id, request["model"])
    model = base_model(settings, inherit_shape(request, parent) if parent else request)
    train = usable_file(session, owner_id, request["training_file"], "training_file")
    check_example_count(train, settings.min_examples)
    valid = usable_file(session, owner_id, request["validation_file"], "validation_file") \
        if request.get("validation_file") else None
    kind = method_type(request)
    check_file_format(train, kind, "training_file")
    check_file_format(valid, kind, "validation_file")
    graded = (request.get("method") or {}).get("eval") or None
    eval_file = usable_file(session, owner_id, graded["eval_file"], "method.eval.eval_file") \
        if graded and graded.get("eval_file") else None
    if graded:
        _check_graded_source(valid, eval_file)
    for param, row in (("training_file", train), ("validation_file", valid), ("method.eval.eval_file", eval_file)):
        if row is not None and file_format(row) in (CHAT, PREFERENCE) and not model.has_chat_template:
            raise InvalidRequest(f"{param}: {row.id} is {_FORMAT_WORDS[file_format(row) or CHAT]}, but "
                                 f"{no_chat_template_message(model.name)}",
                                 code="invalid_file", param=param)
    if request.get("integrations"):
        raise InvalidRequest("integrations are not supported", param="integrations")
    job_id = new_id("ftjob")
    seed = request.get("seed")
    seed = secrets.randbelow(2**31) if seed is None else seed
    body = inherit_shape(request, parent) if parent else request
    spec = build_spec({**body, "seed": seed}, model, settings, job_id, train_examples=upload_examples(train),
                      init_adapter=parent.adapter_key if parent else None)
    now = utcnow()
    job = Job(id=job_id, owner_id=owner_id, model=model.name, training_file=train.id,
              parent_model=parent.model_id if parent else None, parent_job_id=parent.job_id if parent else None,
              validation_file=request.get("validation_file"), status=JobStatus.QUEUED, seed=seed,
              suffix=request.get("suffix"),
              metadata_=request.get("metadata"), hyperparameters=spec.hyperparameters, method=spec.method,
              train_config=spec.train_config, memory_estimate=spec.memory_estimate, queue=spec.queue,
              idempotency_key=idempotency_key, request_hash=digest, result_files=[], steps_completed=0,
              total_steps=spec.total_steps, created_at=now, updated_at=now)
    session.add(job)
    try:
        session.flush()
    except IntegrityError:  # a concurrent request with the same idempotency key won the insert
        session.rollback()
        existing = _existing(session, owner_id, idempotency_key or "", digest) if idempotency_key else None
        if existing is None:
            raise
        return existing, False
    add_event(session, job_id, f"Created fine-tuning job: {job_id}")
    if parent is not None:
        add_event(session, job_id, f"Continued from {parent.model_id} ({parent.describe()}, base {model.name}): "
                  "its LoRA weights, with a fresh optimizer", data={"parent_model": parent.model_id,
                                                                   "parent_job_id": parent.job_id,
                                                                   "parent_step": parent.step})
    for role, row in (("training", train), ("validation", valid)):
        if row is not None:
            _validated_event(session, job_id, role, row)
    est, auto = spec.memory_estimate, _epochs_auto(request)
    add_event(session, job_id, f"Fine-tuning job queued on {spec.queue}: {_run_length(spec, train, auto)}, "
              f"estimated peak memory {est['total_mib']:.0f} MiB (cap {est['memory_cap_mib']} MiB)",
              data={"memory_estimate": est, "total_steps": spec.total_steps,
                    "n_epochs": spec.hyperparameters["n_epochs"], "n_epochs_auto": auto})
    enqueue_after_commit(session, enqueuer, job_id, spec.queue)
    return job, True


def list_jobs(session: Session, owner_id: str, *, metadata: Iterable[tuple[str, str]] = (),
              without_metadata: bool = False, after: str | None = None, limit: int = 20) -> tuple[list[Job], bool]:
    """The owner's jobs, newest first, after the job `after`: those whose metadata holds every
    (key, value) pair of `metadata`, or (`without_metadata`) those without metadata.
    Returns (jobs, has_more).

    Raises:
        InvalidRequest: `after` is not one of the owner's jobs (`invalid_cursor`).
    """
    stmt = select(Job).where(Job.owner_id == owner_id)
    if without_metadata:
        stmt = stmt.where(Job.metadata_.is_(None))
    for key, value in metadata:
        stmt = stmt.where(Job.metadata_[key].as_string() == value)
    cursor = None
    if after:
        anchor = cursor_row(session, Job, after, owner_id=owner_id)
        cursor = (anchor.created_at, anchor.id)
    return keyset_page(session, stmt, sort=(Job.created_at, Job.id), cursor=cursor, limit=limit)


def count_by_status(session: Session) -> dict[str, int]:
    """How many jobs are in each status (statuses without a job are left out)."""
    return {status: n for status, n in session.execute(select(Job.status, func.count()).group_by(Job.status))}
