"""Integration: the real SmolLM2-135M-Instruct in 4-bit NF4 on CPU, real GSM8K from ../shared/data."""

import json
from pathlib import Path

import pytest
import torch

from lcsb_core.data import gsm8k_to_chat
from lcsb_core.training.config import TrainConfig
from lcsb_core.training.history import read_history
from lcsb_core.training.trainer import Trainer

pytestmark = pytest.mark.integration
GSM8K = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "gsm8k"


def write_chat(src: Path, dst: Path, start: int, count: int) -> Path:
    assert src.is_file(), f"GSM8K data missing at {src} (see ../shared/data/README.md)"
    rows = src.read_text().splitlines()[start:start + count]
    dst.write_text("".join(json.dumps(gsm8k_to_chat(json.loads(r))) + "\n" for r in rows))
    return dst


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("smollm2")
    cfg = TrainConfig.from_dict({
        "data": {"train_file": str(write_chat(GSM8K / "train.jsonl", tmp / "train.jsonl", 0, 160)),
                 "validation_file": str(write_chat(GSM8K / "test.jsonl", tmp / "eval.jsonl", 0, 48)),
                 "max_seq_len": 256},
        "model": {"name_or_path": "SmolLM2-135M-Instruct", "quantization": "nf4", "device": "cpu"},
        "lcsb": {"schedule": "cyclic", "k": 8},
        "optim": {"learning_rate": 2e-4, "warmup_steps": 2, "lr_schedule": "constant"},
        "batch_size": 4, "max_steps": 20, "eval_every": 0, "save_every": 10, "seed": 42,
        "output_dir": str(tmp / "run"),
    })
    trainer = Trainer(cfg)
    summary = trainer.train()
    return trainer, summary


def test_twenty_lcsb_steps_lower_heldout_eval_loss(run):
    trainer, summary = run
    assert summary["num_layers"] == 30 and summary["k"] == 8 and summary["steps"] == 20
    assert summary["eval_loss_after"] < summary["eval_loss_before"] - 0.02, summary
    rows = read_history(trainer.files.history)
    assert [sorted(r["selected"]) for r in rows[:4]] == [list(range(0, 8)), list(range(8, 16)),
                                                          list(range(16, 24)), list(range(24, 30))]
    assert (trainer.files.checkpoint_dir(10) / "adapter_model.safetensors").is_file()


def test_base_is_nf4_and_only_lora_trains(run):
    import bitsandbytes as bnb

    trainer, _ = run
    four_bit = [m for m in trainer.model.modules() if isinstance(m, bnb.nn.Linear4bit)]
    assert len(four_bit) == 30 * 7 and four_bit[0].weight.quant_type == "nf4"
    assert sum(p.numel() for p in trainer.params) == 4_884_480  # r16 on 7 projections x 30 layers
    trainable_names = {n for n, p in trainer.model.named_parameters() if p.requires_grad}
    assert all(".lora_" in n for n in trainable_names)


def test_adapter_reloads_with_the_same_logits(run):
    from peft import PeftModel

    from lcsb_core.models.loading import load_base_model, resolve_model_path
    from lcsb_core.models.modules import autocast_for

    trainer, _ = run
    ids = torch.tensor([[1, 504, 3458, 314, 253, 1345, 30, 2]])
    trainer.model.eval()
    with torch.no_grad(), autocast_for(trainer.model):
        expected = trainer.model(input_ids=ids).logits.float()
    path = resolve_model_path("SmolLM2-135M-Instruct")
    base = load_base_model(path, quantization="nf4", device=torch.device("cpu"))
    reloaded = PeftModel.from_pretrained(base, trainer.files.adapter).eval()
    with torch.no_grad(), autocast_for(reloaded):
        got = reloaded(input_ids=ids).logits.float()
    torch.testing.assert_close(got, expected, rtol=0.02, atol=0.05)
    # and on the unquantized (bf16) base, as users load it for inference
    plain = PeftModel.from_pretrained(load_base_model(path, quantization="bf16", device=torch.device("cpu")),
                                      trainer.files.adapter).eval()
    with torch.no_grad():
        logits = plain(input_ids=ids).logits.float()
    assert torch.isfinite(logits).all() and logits.shape == expected.shape
