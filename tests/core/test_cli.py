"""`lcsb train` end to end on a tiny random Llama that uses SmolLM2's tokenizer and chat template,
with real GSM8K examples; config errors exit 2 naming the field."""

import json
import shutil
from pathlib import Path

import pytest
import torch
import yaml
from transformers import LlamaConfig, LlamaForCausalLM
from typer.testing import CliRunner

from lcsb_core.cli import app
from lcsb_core.data import gsm8k_to_chat
from lcsb_core.models.gguf_import import ensure_default_model

GSM8K = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "gsm8k"


@pytest.fixture(scope="module")
def tiny_model_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("tiny-smol")
    src = ensure_default_model()
    torch.manual_seed(0)
    cfg = LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=3, num_attention_heads=4,
                      num_key_value_heads=2, vocab_size=49152, tie_word_embeddings=True, pad_token_id=2,
                      bos_token_id=1, eos_token_id=2)
    LlamaForCausalLM(cfg).save_pretrained(out)
    for f in src.iterdir():
        if f.name.startswith("tokenizer") or f.name.startswith("chat_template") or f.name.startswith("special"):
            shutil.copy(f, out / f.name)
    return out


def write_job(tmp: Path, model_dir: Path, **over) -> Path:
    assert GSM8K.is_file() or GSM8K.is_dir(), f"GSM8K missing at {GSM8K}"
    rows = (GSM8K / "train.jsonl").read_text().splitlines()
    (tmp / "train.jsonl").write_text("".join(json.dumps(gsm8k_to_chat(json.loads(r))) + "\n" for r in rows[:12]))
    (tmp / "eval.jsonl").write_text("".join(json.dumps(gsm8k_to_chat(json.loads(r))) + "\n" for r in rows[12:16]))
    job = {"data": {"train_file": str(tmp / "train.jsonl"), "validation_file": str(tmp / "eval.jsonl"),
                    "max_seq_len": 128},
           "model": {"name_or_path": str(model_dir), "quantization": "fp32", "device": "cpu"},
           "lcsb": {"schedule": "cyclic", "k": 1}, "lora": {"rank": 2, "alpha": 4},
           "optim": {"learning_rate": 1e-3}, "batch_size": 4, "max_steps": 4, "save_every": 2,
           "output_dir": str(tmp / "run"), **over}
    path = tmp / "job.yaml"
    path.write_text(yaml.safe_dump(job))
    return path


def test_train_writes_every_output(tmp_path, tiny_model_dir):
    result = CliRunner().invoke(app, ["train", str(write_job(tmp_path, tiny_model_dir))])
    assert result.exit_code == 0, result.output
    run = tmp_path / "run"
    summary = json.loads((run / "summary.json").read_text())
    assert summary["steps"] == 4 and summary["num_layers"] == 3 and summary["k"] == 1
    text = " ".join(result.output.split())  # the start line states the schedule and learning rate resolved
    assert "schedule: 1 of 3 layers per step" in text and "learning rate 0.001 after" in text, text
    assert summary["eval_loss_before"] > 0 and summary["eval_loss_after"] > 0
    for rel in ("adapter/adapter_config.json", "adapter/adapter_model.safetensors", "metrics.jsonl",
                "metrics.csv", "selection_history.jsonl", "config.json", "plots/loss.png",
                "plots/selection_heatmap.png", "checkpoints/step-000002/trainer_state.pt"):
        assert (run / rel).is_file(), rel
    resolved = json.loads((run / "config.json").read_text())
    assert resolved["resolved"]["total_steps"] == 4 and resolved["lcsb"]["k"] == 1
    history = [json.loads(line) for line in (run / "selection_history.jsonl").read_text().splitlines()]
    assert [h["selected"] for h in history] == [[0], [1], [2], [0]]


def test_override_and_resume(tmp_path, tiny_model_dir):
    job = write_job(tmp_path, tiny_model_dir)
    result = CliRunner().invoke(app, ["train", str(job), "--set", "lora.rank=3", "--set", "save_every=2"])
    assert result.exit_code == 0, result.output
    run = tmp_path / "run"
    assert json.loads((run / "config.json").read_text())["lora"]["rank"] == 3
    first = (run / "selection_history.jsonl").read_text().splitlines()
    adapter = (run / "adapter" / "adapter_model.safetensors").read_bytes()
    shutil.rmtree(run / "adapter")
    shutil.rmtree(run / "checkpoints" / "step-000004")  # the last step's: as if the run had stopped before it
    result = CliRunner().invoke(app, ["train", str(job), "--set", "lora.rank=3", "--resume"])
    assert result.exit_code == 0, result.output
    again = (run / "selection_history.jsonl").read_text().splitlines()
    assert len(again) == 4 and again == first  # steps 3-4 re-run from the step-2 checkpoint, identically
    assert (run / "adapter" / "adapter_model.safetensors").read_bytes() == adapter


def test_config_error_exits_2_and_names_the_field(tmp_path, tiny_model_dir):
    job = write_job(tmp_path, tiny_model_dir, lcsb={"schedule": "zigzag"})
    result = CliRunner().invoke(app, ["train", str(job)])
    assert result.exit_code == 2 and "lcsb.schedule" in result.output


def test_a_setting_that_cannot_take_effect_exits_2_before_the_model_loads(tmp_path):
    job = write_job(tmp_path, tmp_path / "no-model-here", eval_every=2)
    raw = yaml.safe_load(job.read_text())
    del raw["data"]["validation_file"]
    job.write_text(yaml.safe_dump(raw))
    result = CliRunner().invoke(app, ["train", str(job)])  # the model folder does not exist: never reached
    assert result.exit_code == 2, result.output
    text = " ".join(result.output.split())  # the console wraps long lines
    assert "error (invalid_config): eval_every: is 2, but periodic evaluation needs data.validation_file" in text


def test_bad_data_exits_2_and_names_the_line(tmp_path, tiny_model_dir):
    job = write_job(tmp_path, tiny_model_dir)
    lines = (tmp_path / "train.jsonl").read_text().splitlines()
    lines[4] = '{"messages": [{"role": "assistant", "content": "hi"}]}'
    (tmp_path / "train.jsonl").write_text("\n".join(lines) + "\n")
    result = CliRunner().invoke(app, ["train", str(job)])
    assert result.exit_code == 2 and "invalid_file" in result.output and "line 5" in result.output
