"""The one module that knows bitsandbytes (as PEFT's `tuners/lora/bnb.py` isolates it).

`quantization_config("nf4", device)` gives a transformers `BitsAndBytesConfig` valid for the device:
4-bit NF4 weights (Dettmers et al., QLoRA, arXiv 2305.14314) with bf16 compute; double quantization
on CUDA only, because bitsandbytes' CPU backend does not support it.
"""

from __future__ import annotations

import importlib.util

import torch

from lcsb_core.errors import ModelLoadError


def is_bnb_available() -> bool:
    """True when bitsandbytes is importable."""
    return importlib.util.find_spec("bitsandbytes") is not None


def quantization_config(quantization: str, device: torch.device):
    """`BitsAndBytesConfig` for `quantization` on `device`, or None for unquantized bases.

    Raises:
        ModelLoadError: `nf4` asked for without bitsandbytes installed.
    """
    if quantization != "nf4":
        return None
    if not is_bnb_available():
        raise ModelLoadError("quantization 'nf4' needs bitsandbytes: `pip install bitsandbytes` "
                             "(or choose quantization 'bf16')")
    from transformers import BitsAndBytesConfig

    return BitsAndBytesConfig(
        load_in_4bit=True,
        bnb_4bit_quant_type="nf4",
        bnb_4bit_compute_dtype=torch.bfloat16,
        bnb_4bit_use_double_quant=device.type == "cuda",
    )


def base_dtype(quantization: str) -> torch.dtype:
    """dtype of the non-quantized base tensors (embeddings, norms, residual stream)."""
    return torch.float32 if quantization == "fp32" else torch.bfloat16


def disable_cpu_weight_repacking(model: torch.nn.Module) -> int:
    """Keep bitsandbytes from repacking 4-bit weights for CPU inference; returns the modules changed.

    bitsandbytes >= 0.48 (`Linear4bit.forward`) converts a layer's NF4 weight to a CPU-inference
    packing the first time it runs in eval mode on an AVX512-BF16 CPU, and never converts it back on
    `train()`. Training after an evaluation then runs the packed format through `gemv_4bit`, which has
    no autograd kernel: the gradient through the frozen base weight is silently wrong (PyTorch warns
    "an autograd kernel was not registered"), and the next `state_dict()` (a checkpoint save)
    unpacks it again. Measured on SmolLM2-135M NF4: the train loss jumped from 1.7 to 16.8 right
    after the first checkpoint. Turning the packing off keeps one weight format throughout.
    """
    if not is_bnb_available():
        return 0
    import bitsandbytes as bnb

    changed = 0
    for module in model.modules():
        if isinstance(module, bnb.nn.Linear4bit) and getattr(module, "support_avx512bf16_for_cpu", False):
            module.support_avx512bf16_for_cpu = False
            changed += 1
    return changed


def count_4bit_modules(model: torch.nn.Module) -> int:
    """Number of bitsandbytes `Linear4bit` modules in `model` (0 without bitsandbytes)."""
    if not is_bnb_available():
        return 0
    import bitsandbytes as bnb

    return sum(isinstance(m, bnb.nn.Linear4bit) for m in model.modules())
