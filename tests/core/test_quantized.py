"""NF4 (bitsandbytes 4-bit) base on CPU: config per device, and gradients unchanged by evaluation.

Regression: bitsandbytes repacks 4-bit weights for CPU inference on the first eval-mode forward and
never unpacks them on train(); training afterwards got silently wrong gradients through the base
weights, and the next checkpoint (state_dict) unpacked them mid-run (loss 1.7 -> 16.8 on SmolLM2).
"""

import bitsandbytes as bnb
import pytest
import torch

from lcsb_core.models.loading import load_base_model
from lcsb_core.models.quantization import (
    CPU_FP32_ENV,
    base_dtype,
    compute_dtype,
    cpu_has_native_bf16,
    quantization_config,
)
from lcsb_core.training.config import LoraSettings
from lcsb_core.training.lora import apply_lora
from lcsb_core.training.loss import lm_loss_sums
from tests.core.tiny import batch, tiny_base


@pytest.fixture(scope="module")
def nf4_model(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tiny-llama")
    base = tiny_base(0)
    base.save_pretrained(folder)
    model = load_base_model(folder, quantization="nf4", device=torch.device("cpu"))
    return apply_lora(model, LoraSettings(rank=4, alpha=8), seed=0)


def grads(model):
    for p in model.parameters():
        p.grad = None
    lm_loss_sums(model, batch(0)).loss_sum.backward()
    return [p.grad.clone() for p in model.parameters() if p.requires_grad]


def test_config_per_device():
    cpu = quantization_config("nf4", torch.device("cpu"))
    assert cpu.load_in_4bit and cpu.bnb_4bit_quant_type == "nf4" and not cpu.bnb_4bit_use_double_quant
    assert cpu.bnb_4bit_compute_dtype == (torch.bfloat16 if cpu_has_native_bf16() else torch.float32)
    assert quantization_config("nf4", torch.device("cuda")).bnb_4bit_use_double_quant
    assert quantization_config("bf16", torch.device("cpu")) is None


def test_nf4_computes_in_the_dtype_the_hardware_multiplies_fast():
    assert compute_dtype(torch.device("cuda")) == torch.bfloat16
    assert base_dtype("nf4", torch.device("cpu")) == compute_dtype(torch.device("cpu"))
    assert base_dtype("bf16", torch.device("cpu")) == torch.bfloat16  # an explicit choice stays
    assert base_dtype("fp32", torch.device("cuda")) == torch.float32


def test_fp32_compute_can_be_forced_on_any_cpu(monkeypatch):
    monkeypatch.setenv(CPU_FP32_ENV, "1")
    assert compute_dtype(torch.device("cpu")) == torch.float32
    assert quantization_config("nf4", torch.device("cpu")).bnb_4bit_compute_dtype == torch.float32
    assert compute_dtype(torch.device("cuda")) == torch.bfloat16  # a CPU-only override
    monkeypatch.setenv(CPU_FP32_ENV, "0")
    assert compute_dtype(torch.device("cpu")) == (torch.bfloat16 if cpu_has_native_bf16() else torch.float32)


def test_base_linears_are_nf4(nf4_model):
    layers = [m for m in nf4_model.modules() if isinstance(m, bnb.nn.Linear4bit)]
    assert len(layers) == 4 * 7 and all(m.weight.quant_type == "nf4" for m in layers)


def test_evaluation_and_checkpoint_do_not_change_gradients(nf4_model):
    before = grads(nf4_model)
    nf4_model.eval()
    with torch.no_grad():
        lm_loss_sums(nf4_model, batch(1))
    nf4_model.train()
    after_eval = grads(nf4_model)
    nf4_model.state_dict()  # what a checkpoint save does
    after_save = grads(nf4_model)
    for a, b, c in zip(before, after_eval, after_save, strict=False):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
        torch.testing.assert_close(a, c, rtol=0, atol=0)
    assert sum(float(g.abs().sum()) for g in before) > 0


def test_dequantized_weights_give_bit_identical_outputs_and_restore_the_layers(nf4_model):
    """Generation's dequantize-once forward (`dequantized_weights`) is the same arithmetic as
    bitsandbytes' per-call dequantization: logits equal bit for bit, with the LoRA applied; on leaving
    the block every NF4 layer runs its own forward again, and training through it still works."""
    from lcsb_core.models.quantization import dequantized_weights

    layers = [m for m in nf4_model.modules() if isinstance(m, bnb.nn.Linear4bit)]
    before = grads(nf4_model)
    with torch.no_grad():
        nf4_model.eval()
        ids = batch(0)["input_ids"]
        plain = nf4_model(input_ids=ids).logits
        with dequantized_weights(nf4_model) as stats:
            cached = nf4_model(input_ids=ids).logits
            again = nf4_model(input_ids=ids).logits
        nf4_model.train()
    assert torch.equal(plain, cached) and torch.equal(plain, again)
    assert stats == {"layers": len(layers), "cached": len(layers)} and len(layers) > 0
    assert all("forward" not in m.__dict__ for m in layers)
    after = grads(nf4_model)
    assert any(g.abs().sum() > 0 for g in after)
    assert all(torch.equal(a, b) for a, b in zip(before, after, strict=True))


def test_dequantized_weights_refuse_a_forward_with_autograd(nf4_model):
    """The cached forward has no gradient path: a training forward inside the block is an error, not
    silently different gradients."""
    from lcsb_core.models.quantization import dequantized_weights

    layer = next(m for m in nf4_model.modules() if isinstance(m, bnb.nn.Linear4bit))
    x = torch.randn(2, layer.in_features, requires_grad=True)
    with dequantized_weights(nf4_model), pytest.raises(RuntimeError, match="for inference"):
        layer(x)
    assert "forward" not in layer.__dict__

