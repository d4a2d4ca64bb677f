"""The training process of one job: `python -m worker.training.child <spec.json>`, started by the supervisor
in a fresh interpreter (a fresh CUDA context and allocator each time; all its memory goes back to the
system when it exits).

First it reads its spec (`worker.training.spec.ChildSpec`; a bad one exits with status 2 and the
reason on stderr), joins its memory cage (`worker.limits.enter_cage`) and arranges to die with the supervisor
(`PR_SET_PDEATHSIG`), before torch is imported. Then it reads the job, fetches the datasets (and a
continued job's starting adapter) from storage, checks them with the model's tokenizer and records what
training will see (`worker.training.datacheck`, before the model loads), runs the trainer with
`JobReporter` (events, progress, checkpoints, per-step cancel check) and `DivergenceWatch` (a finite
divergence: warning, or failure `diverged` with `method.stop_on_divergence`), and writes its `Outcome` as JSON to
`spec.result_path`. SIGUSR1 from the supervisor means "time limit reached": the loop stops before its
next step and the outcome is `timeout`. The supervisor turns the outcome (or the exit status, when
there is none) into the job's terminal state.
"""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import sys
import threading
from contextlib import ExitStack
from pathlib import Path

from lcsb_service.status import JobStatus
from worker.limits import enter_cage
from worker.training.outcome import Outcome, classify, write_outcome
from worker.training.spec import ChildSpec, ChildSpecError

log = logging.getLogger("worker.training.child")
PR_SET_PDEATHSIG = 1


def die_with_parent(parent_pid: int) -> None:
    """Ask the kernel to SIGKILL this process when its parent (the supervisor) dies, and exit now if
    it already has."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        log.warning("prctl(PR_SET_PDEATHSIG) unavailable: this process may outlive its worker")
    if os.getppid() != parent_pid:
        os._exit(1)


def _local_input(stack: ExitStack, storage, row, folder: Path) -> Path:
    """A local path to a stored dataset, named with its upload's suffix (the reader picks the format
    from it: `.txt` is a corpus, anything else JSONL)."""
    source = stack.enter_context(storage.local_copy(row.storage_key))
    link = folder / f"{row.id}{Path(row.filename).suffix.lower()}"
    link.unlink(missing_ok=True)
    link.symlink_to(Path(source).resolve())
    return link


def training_config(spec: ChildSpec, db, storage, stack: ExitStack):
    """The job's TrainConfig with local paths. Raises ModelLoadError (model not installed here),
    ConfigError (the stored config no longer validates)."""
    from lcsb_core.errors import ModelLoadError
    from lcsb_service.artifacts import fetch_adapter
    from lcsb_service.catalog import find_model
    from lcsb_service.job_records import job_inputs
    from lcsb_service.jobspec import train_config_for

    with db.session() as s:
        found = job_inputs(s, spec.job_id)
    job, train, valid, graded = found.job, found.training_file, found.validation_file, found.eval_file
    model = find_model([Path(p) for p in spec.model_dirs], job.model)
    if model is None:
        raise ModelLoadError(f"the base model {job.model!r} is not installed on this worker")
    train_path = _local_input(stack, storage, train, spec.inputs_dir)
    valid_path = _local_input(stack, storage, valid, spec.inputs_dir) if valid else None
    eval_path = _local_input(stack, storage, graded, spec.inputs_dir) if graded else None
    init = job.train_config.get("init_adapter")  # a continued job: its parent's adapter (lcsb_service.lineage)
    init_path = fetch_adapter(storage, init, spec.inputs_dir / "init_adapter") if init else None
    return train_config_for(job.train_config, model_path=str(model.path), train_path=str(train_path),
                            validation_path=str(valid_path) if valid_path else None,
                            output_dir=spec.run_dir, device=spec.device,
                            eval_path=str(eval_path) if eval_path else None,
                            init_adapter_path=str(init_path) if init_path else None), {train_path.name: train.filename}


def public_text(message: str, spec: ChildSpec, names: dict[str, str]) -> str:
    """An error message with the worker's paths replaced: input files by their upload names, paths in
    the model folders by the model's name, the run folder by nothing."""
    inputs = spec.inputs_dir
    pairs = [(str(inputs / local), public) for local, public in names.items()]
    pairs += [(f"{folder}/", "") for folder in (*spec.model_dirs, spec.run_dir, str(inputs))]
    pairs += [(folder, "the model folder") for folder in spec.model_dirs]
    for local, public in pairs:
        message = message.replace(local, public)
    return message


def _cap_cuda(spec: ChildSpec) -> None:
    import torch

    device = torch.device(spec.device if ":" in spec.device else "cuda:0")
    total = torch.cuda.get_device_properties(device).total_memory
    torch.cuda.set_per_process_memory_fraction(min(1.0, spec.cage.cap_mib * 2**20 / total), device)


def _stop_on_divergence(db, job_id: str) -> bool:  # Database
    from lcsb_service.job_records import job_method

    with db.session() as s:
        return bool(job_method(s, job_id).get("stop_on_divergence", False))


def train(spec: ChildSpec, stop: threading.Event) -> Outcome:
    """Run the job's training; every ending becomes an Outcome (nothing is raised)."""
    from lcsb_service.db import Database
    from lcsb_service.storage import Storage
    from worker.threads import ThreadPolicy
    from worker.training.divergence import DivergenceWatch
    from worker.training.reporter import JobReporter

    db, storage = Database(spec.database_url), Storage(spec.storage_url)
    reporter = JobReporter(db, storage, spec.job_id, spec.fine_tuned_model, stop,
                           thread_policy=ThreadPolicy.from_env(os.environ))
    watch = DivergenceWatch(db, spec.job_id, spec.run_dir)
    names: dict[str, str] = {}
    try:
        watch.stop = _stop_on_divergence(db, spec.job_id)
        with ExitStack() as stack:
            cfg, names = training_config(spec, db, storage, stack)
            from lcsb_core.errors import TrainingCancelled
            from lcsb_core.training.trainer import Trainer
            from worker.training.datacheck import check_datasets

            train_set, eval_set = check_datasets(cfg, db, spec.job_id)  # before the model loads
            if spec.device.startswith("cuda"):
                _cap_cuda(spec)
            try:
                summary = Trainer(cfg, callbacks=[watch, reporter], train_dataset=train_set,
                                  eval_dataset=eval_set).train()
            except TrainingCancelled:
                if watch.stopped and watch.verdict is not None:  # a stop always comes with its verdict
                    return Outcome.failed("diverged", f"{watch.verdict['message']}; stopped because "
                                          "method.stop_on_divergence is set", steps=reporter.steps_done,
                                          peak_memory_mib=reporter.peak_mib or None)
                if not stop.is_set():
                    return Outcome(JobStatus.CANCELLED, steps=reporter.steps_done,
                                   peak_memory_mib=reporter.peak_mib or None)
                return Outcome.failed("timeout", f"The job reached its time limit of {spec.time_limit_s:.0f} s "
                                      f"after {reporter.steps_done} of {reporter.total_steps} steps; its "
                                      "checkpoints are kept", steps=reporter.steps_done,
                                      peak_memory_mib=reporter.peak_mib or None)
        return Outcome(JobStatus.SUCCEEDED, steps=summary["steps"], peak_memory_mib=summary.get("peak_memory_mib"),
                       summary=summary, result=reporter.result)
    except Exception as exc:  # every failure becomes a public error code
        log.exception("job %s failed", spec.job_id)
        out = classify(exc, cap_mib=spec.cage.cap_mib, peak_mib=reporter.peak_mib or None,
                       steps=reporter.steps_done)
        out.message = public_text(out.message or "", spec, names)
        return out
    finally:
        db.dispose()


def main(argv: list[str]) -> int:
    """`python -m worker.training.child <spec.json>`: 0 with an outcome file written, 2 for a missing or
    invalid spec (the reason on stderr), 3 when even the outcome could not be built (out of memory)."""
    if len(argv) != 1:
        print("usage: python -m worker.training.child <spec.json>", file=sys.stderr)
        return 2
    try:
        spec = ChildSpec.read(Path(argv[0]))
    except ChildSpecError as exc:
        print(exc, file=sys.stderr)
        return 2
    die_with_parent(spec.parent_pid)
    enter_cage(spec.cage.limits_spec())
    stop = threading.Event()
    signal.signal(signal.SIGUSR1, lambda *_: stop.set())
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        outcome = train(spec, stop)
    except MemoryError:  # even building the Outcome failed: the supervisor reads the exit status
        return 3
    write_outcome(Path(spec.result_path), outcome)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
