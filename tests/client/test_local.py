"""Client parts that need no server: the YAML job spec, `--what` choices, adapter unpacking (refusing
paths that leave the folder), error formatting, and the `lcsb` entry point (core and service commands
in one app; importing it loads no torch and nothing of the service)."""

from __future__ import annotations

import io
import subprocess
import sys
import tarfile
from pathlib import Path

import httpx
import openai
import pytest

from lcsb_client.errors import ClientError, from_body, from_openai
from lcsb_client.outputs import parse_what, unpack_adapter
from lcsb_client.spec import JobSpec

ROOT = Path(__file__).resolve().parents[2]


def spec_error(tmp_path: Path, text: str, *overrides: str) -> ClientError:
    path = tmp_path / "job.yaml"
    path.write_text(text)
    with pytest.raises(ClientError) as err:
        JobSpec.load(path, list(overrides))
    return err.value


def test_spec_paths_ids_and_overrides(tmp_path):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "train.jsonl").write_text("{}\n")
    path = tmp_path / "job.yaml"
    path.write_text("model: M\ntraining_path: data/train.jsonl\nvalidation_file: file-v\n"
                    "method: {lcsb: {k: 4}}\nseed: 3\n")
    spec = JobSpec.load(path, ["method.lcsb.k=8", "hyperparameters.n_epochs=2", "suffix=x"])
    assert spec.training_path == tmp_path.resolve() / "data" / "train.jsonl" and spec.validation_path is None
    (tmp_path / "specs").mkdir()  # a path relative to the spec's folder comes out absolute, without ".."
    (tmp_path / "specs" / "job.yaml").write_text("model: M\ntraining_path: ../data/train.jsonl\n")
    nested = JobSpec.load(tmp_path / "specs" / "job.yaml", [])
    assert nested.training_path == tmp_path.resolve() / "data" / "train.jsonl"
    assert spec.to_request("file-t") == {"model": "M", "training_file": "file-t", "validation_file": "file-v",
                                         "method": {"lcsb": {"k": 8}}, "hyperparameters": {"n_epochs": 2},
                                         "suffix": "x", "seed": 3}


@pytest.mark.parametrize(("text", "overrides", "code", "param", "words"), [
    ("model: M\ntraining_file: f\nepochs: 2\n", (), "invalid_spec", "epochs", "unknown field 'epochs'"),
    ("training_file: f\n", (), "invalid_spec", "model", "needs a model"),
    ("model: M\n", (), "invalid_spec", "training_path", "needs training_path"),
    ("model: M\ntraining_file: f\ntraining_path: t.jsonl\n", (), "invalid_spec", "training_path", "not both"),
    ("model: M\ntraining_path: missing.jsonl\n", (), "file_not_found", "training_path", "no such file"),
    ("model: M\ntraining_file: f\nmethod: cyclic\n", (), "invalid_spec", "method", "must be a mapping"),
    ("- a list\n", (), "invalid_spec", None, "must be a mapping"),
    ("model: [unclosed\n", (), "invalid_spec", None, "cannot read"),
    ("model: M\ntraining_file: f\n", ("seed",), "invalid_spec", "--set", "key=value"),
])
def test_spec_errors_name_the_field(tmp_path, text, overrides, code, param, words):
    err = spec_error(tmp_path, text, *overrides)
    assert (err.code, err.param) == (code, param) and words in err.message


def test_what_choices():
    assert parse_what("all") is None and parse_what("adapter,all") is None
    assert parse_what("adapter, plots,metrics") == {"adapter", "plot", "metrics"}
    with pytest.raises(ClientError) as err:
        parse_what("adapter,weights")
    assert err.value.param == "--what" and "'weights'" in err.value.message


def tar_gz(path: Path, members: dict[str, bytes]) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def test_unpack_adapter_replaces_the_folder_and_refuses_escapes(tmp_path):
    dest = tmp_path / "adapter"
    dest.mkdir()
    (dest / "stale.bin").write_bytes(b"old")
    good = tar_gz(tmp_path / "a.tar.gz", {"adapter/adapter_config.json": b"{}",
                                          "adapter/adapter_model.safetensors": b"w"})
    assert unpack_adapter(good, dest) == dest
    assert sorted(p.name for p in dest.iterdir()) == ["adapter_config.json", "adapter_model.safetensors"]
    flat = tar_gz(tmp_path / "flat.tar.gz", {"adapter_config.json": b"{}", "adapter_model.safetensors": b"w"})
    assert sorted(p.name for p in unpack_adapter(flat, tmp_path / "flat").iterdir()) == [
        "adapter_config.json", "adapter_model.safetensors"]
    evil = tar_gz(tmp_path / "evil.tar.gz", {"adapter/../../escaped.txt": b"x"})
    with pytest.raises(ClientError) as err:
        unpack_adapter(evil, tmp_path / "x" / "adapter")
    assert err.value.code == "invalid_archive" and not (tmp_path.parent / "escaped.txt").exists()


def test_error_formatting():
    body = {"message": "no such job", "type": "invalid_request_error", "param": "fine_tuning_job_id",
            "code": "job_not_found"}
    assert str(from_body(404, {"error": body}, "")) == "error (job_not_found): no such job [fine_tuning_job_id]"
    assert str(from_body(404, body, "")) == "error (job_not_found): no such job [fine_tuning_job_id]"
    assert str(from_body(413, None, "Content Too Large")) == "error (http_413): Content Too Large"
    request = httpx.Request("GET", "http://127.0.0.1:9/v1/files")
    try:  # the openai client wraps the transport's exception
        raise openai.APIConnectionError(request=request) from httpx.ConnectError("refused")
    except openai.APIConnectionError as exc:
        err = from_openai(exc, "http://127.0.0.1:9/v1")
    assert err.code == "connection_error" and "http://127.0.0.1:9/v1 (ConnectError: refused)" in err.message


def test_entry_point_has_every_command_and_loads_no_torch(tmp_path):
    code = ("import sys\n"
            "import lcsb_client, lcsb_client.main\n"
            "heavy = ('torch', 'transformers', 'peft', 'bitsandbytes', 'lcsb_service', 'api', 'sqlalchemy',\n"
            "         'fastapi')\n"
            "print('LOADED', [m for m in heavy if m in sys.modules])\n")
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    assert "LOADED []" in out.stdout
    helped = subprocess.run([sys.executable, "-m", "lcsb_client.main", "--help"], cwd=ROOT, timeout=60,
                            env={**env, "COLUMNS": "120"}, capture_output=True, text=True)
    assert helped.returncode == 0, helped.stderr
    for command in ("train", "import-gguf", "estimate-memory", "gsm8k-to-chat", "files", "jobs"):
        assert f" {command} " in helped.stdout, command
    no_key = subprocess.run([sys.executable, "-m", "lcsb_client.main", "jobs", "list"], cwd=ROOT, timeout=60,
                            env=env, capture_output=True, text=True)
    assert no_key.returncode == 2 and no_key.stdout == ""
    assert no_key.stderr == "error (missing_api_key): no API key: pass --api-key or set LCSB_API_KEY\n"


def test_the_core_commands_are_the_ones_the_client_names():
    """With the core installed (this environment), `lcsb` offers exactly the core's commands that
    `lcsb_client.main.CORE_COMMANDS` stands in for when it is not."""
    from lcsb_client.main import CORE_COMMANDS, app, core_installed
    from lcsb_core.cli import app as core_app

    assert core_installed()
    core = {c.name or c.callback.__name__.replace("_", "-") for c in core_app.registered_commands}
    assert core == set(CORE_COMMANDS) == {"train", "import-gguf", "base-gguf", "export", "estimate-memory",
                                             "gsm8k-to-chat"}
    assert {c.name or c.callback.__name__.replace("_", "-") for c in app.registered_commands} == core | {"chat"}
