"""Helpers of the service tests: model configs, datasets, upload and job shortcuts, a fake run folder
(the layout of `lcsb_core.run_files`, as the worker will publish it)."""

from __future__ import annotations

import json
from pathlib import Path

from lcsb_service import transitions
from lcsb_service.artifacts import publish_checkpoint, publish_run
from lcsb_service.jobspec import fine_tuned_model_name

SMOL_CONFIG = {  # SmolLM2-135M-Instruct's config.json (the fields the catalog and estimator read)
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 576, "intermediate_size": 1536,
    "num_hidden_layers": 30, "num_attention_heads": 9, "num_key_value_heads": 3, "head_dim": 64,
    "vocab_size": 49152, "max_position_embeddings": 8192, "tie_word_embeddings": True,
}
GIANT_CONFIG = {  # Llama-3-70B-class: no test worker class can hold it
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 8192, "intermediate_size": 28672,
    "num_hidden_layers": 80, "num_attention_heads": 64, "num_key_value_heads": 8, "vocab_size": 128256,
    "max_position_embeddings": 8192, "tie_word_embeddings": False,
}
SMOL = "SmolLM2-135M-Instruct"


def chat_lines(n: int, pad: int = 0) -> bytes:
    """`n` valid chat examples as JSONL; `pad` extra characters in each answer."""
    rows = [{"messages": [{"role": "user", "content": f"What is {i} + {i}?"},
                          {"role": "assistant", "content": f"{2 * i}" + "x" * pad}]} for i in range(n)]
    return "".join(json.dumps(r) + "\n" for r in rows).encode()


def preference_lines(n: int) -> bytes:
    """`n` valid preference (DPO) pairs as JSONL, in OpenAI's shape: `input.messages` ending with a user
    turn, one assistant message on each side, the two sides different."""
    rows = [{"input": {"messages": [{"role": "user", "content": f"What is {i} + {i}?"}]},
             "preferred_output": [{"role": "assistant", "content": f"{2 * i}"}],
             "non_preferred_output": [{"role": "assistant", "content": f"{2 * i + 1}"}]} for i in range(n)]
    return "".join(json.dumps(r) + "\n" for r in rows).encode()


def upload(client, tenant, content: bytes | None = None, filename: str = "train.jsonl", purpose: str = "fine-tune"):
    """POST /v1/files; returns the response."""
    return client.post("/v1/files", headers=tenant.headers, data={"purpose": purpose},
                       files={"file": (filename, chat_lines(12) if content is None else content)})


def upload_ok(client, tenant, content: bytes | None = None, filename: str = "train.jsonl") -> dict:
    r = upload(client, tenant, content, filename)
    assert r.status_code == 200, r.text
    return r.json()


def create_job(client, tenant, file_id: str, headers: dict | None = None, **body):
    """POST /v1/fine_tuning/jobs with the SmolLM2 base and small defaults; returns the response."""
    payload = {"model": SMOL, "training_file": file_id, **body}
    return client.post("/v1/fine_tuning/jobs", headers={**tenant.headers, **(headers or {})}, json=payload)


def job_ok(client, tenant, file_id: str | None = None, **body) -> dict:
    file_id = file_id or upload_ok(client, tenant)["id"]
    r = create_job(client, tenant, file_id, **body)
    assert r.status_code == 200, r.text
    return r.json()


def assert_error(response, status: int, code: str | None = None, param: str | None = None) -> dict:
    """The response is an OpenAI error body with this status (and code/param when given)."""
    assert response.status_code == status, response.text
    err = response.json()["error"]
    assert set(err) == {"message", "type", "param", "code"} and err["message"]
    if code is not None:
        assert err["code"] == code, err
    if param is not None:
        assert err["param"] == param, err
    return err


def fake_run(root: Path, steps: tuple[int, ...] = (2, 4)) -> Path:
    """A run folder as the trainer writes it: adapter/, checkpoints/step-N/ (with trainer_state.pt),
    selection_history.jsonl, metrics.jsonl/.csv, summary.json, plots/*.png."""
    run = root / "run"
    for folder in [run / "adapter"] + [run / "checkpoints" / f"step-{s:06d}" for s in steps]:
        folder.mkdir(parents=True)
        (folder / "adapter_config.json").write_text(json.dumps({"r": 16, "peft_type": "LORA"}))
        (folder / "adapter_model.safetensors").write_bytes(b"weights-" + folder.name.encode())
    for s in steps:
        (run / "checkpoints" / f"step-{s:06d}" / "trainer_state.pt").write_bytes(b"optimizer state")
    (run / "selection_history.jsonl").write_text("".join(json.dumps({"step": i, "selected": [i % 4]}) + "\n"
                                                         for i in range(4)))
    (run / "metrics.csv").write_text("step,split,loss\n1,train,2.5\n2,train,2.1\n")
    (run / "summary.json").write_text(json.dumps({"steps": 4}))
    (run / "plots").mkdir()
    (run / "plots" / "loss.png").write_bytes(b"\x89PNG\r\n\x1a\nfake")
    return run


BOUNDARY = "lcsb-test-boundary"


def multipart_stream(size: int, filename: str = "big.jsonl", chunk: int = 1 << 20, line: bytes | None = None):
    """A multipart/form-data body (purpose=fine-tune, file of `size` bytes) as a generator, so the
    client sends it chunked and holds one chunk at a time. The file repeats `line` (default a valid
    chat example) and is cut at `size` bytes."""
    line = line or chat_lines(1)
    yield (f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="purpose"\r\n\r\nfine-tune\r\n'
           f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="file"; filename="{filename}"\r\n'
           "Content-Type: application/jsonl\r\n\r\n").encode()
    block = line * max(1, chunk // len(line))
    sent = 0
    while sent < size:
        piece = block[: size - sent]
        sent += len(piece)
        yield piece
    yield f"\r\n--{BOUNDARY}--\r\n".encode()


MULTIPART_HEADERS = {"Content-Type": f"multipart/form-data; boundary={BOUNDARY}"}


NOBODY = 65534  # uid and gid of `nobody` (Debian/Ubuntu)


def world_readable_tree(root: Path) -> list[Path]:
    """Assert every file under `root` is 0644 and every folder 0755; returns the files."""
    files = []
    for path in sorted(root.rglob("*")):
        want = 0o755 if path.is_dir() else 0o644
        assert path.stat().st_mode & 0o7777 == want, f"{path.relative_to(root)}: {oct(path.stat().st_mode & 0o7777)}"
        if path.is_file():
            files.append(path)
    return files


def read_as_other_user(path: Path) -> bytes | None:
    """`cat path` as uid/gid `nobody` (no supplementary groups), in a child process; the bytes read.
    Returns None when this process cannot switch users (not root). Fails the test when the read fails."""
    import os
    import subprocess

    if os.geteuid() != 0:
        return None
    done = subprocess.run(["cat", str(path)], user=NOBODY, group=NOBODY, extra_groups=[], capture_output=True,
                          check=False)
    assert done.returncode == 0, f"nobody cannot read {path}: {done.stderr.decode(errors='replace')}"
    return done.stdout


def publish_outputs(app, job: dict, owner_name: str, run, *, finish: bool) -> str:
    """Publish checkpoints at steps 2 and 4 (and, with `finish`, the run, succeeded); the job's ft name."""
    name = fine_tuned_model_name(job["model"], owner_name, job.get("user_provided_suffix"), job["id"])
    storage = app.state.storage
    with app.state.db.session() as s:
        transitions.claim(s, job["id"])
    for step in (2, 4):
        with app.state.db.session() as s:
            publish_checkpoint(s, storage, job_id=job["id"], step=step, fine_tuned_model=name,
                               folder=run / "checkpoints" / f"step-{step:06d}")
    if finish:
        with app.state.db.session() as s:
            files = publish_run(s, storage, job_id=job["id"], owner_id=job["organization_id"], run_dir=run)
            transitions.finish(s, job["id"], fine_tuned_model=name, trained_tokens=10, result_files=files)
    return name
