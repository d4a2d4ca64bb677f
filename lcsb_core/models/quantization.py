"""The one module that knows bitsandbytes (as PEFT's `tuners/lora/bnb.py` isolates it).

`quantization_config("nf4", device)` gives a transformers `BitsAndBytesConfig` valid for the device:
4-bit NF4 weights (Dettmers et al., QLoRA, arXiv 2305.14314) computed in `compute_dtype(device)`
(bf16 where the hardware has bf16 matrix units, else fp32); double quantization on CUDA only, because
bitsandbytes' CPU backend does not support it.
"""

from __future__ import annotations

import importlib.util
import os

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
        bnb_4bit_compute_dtype=compute_dtype(device),
        bnb_4bit_use_double_quant=device.type == "cuda",
    )


def cpu_has_native_bf16() -> bool:
    """True when this CPU multiplies bf16 matrices in hardware (AVX512-BF16 or AMX tiles).

    Without them PyTorch's CPU bf16 GEMM falls back to a slow path: measured on an AVX2-only AMD EPYC
    (torch 2.13), a 1024^3 bf16 matmul took 3.44 s against 0.054 s in fp32 (64x), and one SmolLM2-135M
    NF4 training step (batch 4 x 256) took about 300 s instead of about 3 s."""
    return bool(torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported())


#: Environment variable that, set to `1`, makes an NF4 base compute in fp32 on every CPU, so that a
#: run on a bf16-capable CPU reproduces the numerics of one made on an AVX2-only CPU (benchmarks that
#: complete a grid begun on another machine set it; see BENCHMARKS.md).
CPU_FP32_ENV = "LCSB_CPU_FP32_COMPUTE"


def compute_dtype(device: torch.device) -> torch.dtype:
    """dtype an NF4 base computes in (dequantized weights, residual stream, autocast): bf16 on CUDA and
    on CPUs with native bf16 (`cpu_has_native_bf16`), else fp32; fp32 on any CPU when the environment
    sets `LCSB_CPU_FP32_COMPUTE=1` (`CPU_FP32_ENV`). The NF4 weights and the LoRA adapter are the same
    either way; only activation precision and memory differ (fp32: 2x per element)."""
    if device.type == "cpu" and (os.environ.get(CPU_FP32_ENV) == "1" or not cpu_has_native_bf16()):
        return torch.float32
    return torch.bfloat16


def base_dtype(quantization: str, device: torch.device) -> torch.dtype:
    """dtype of the non-quantized base tensors (embeddings, norms, residual stream): fp32 for `fp32`,
    bf16 for `bf16` (as asked, whatever the hardware), `compute_dtype(device)` for `nf4`."""
    if quantization == "nf4":
        return compute_dtype(device)
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
