"""The one module that knows bitsandbytes (as PEFT's `tuners/lora/bnb.py` isolates it).

`quantization_config("nf4", device)` gives a transformers `BitsAndBytesConfig` valid for the device:
4-bit NF4 weights (Dettmers et al., QLoRA, arXiv 2305.14314) computed in `compute_dtype(device)`
(bf16 where the hardware has bf16 matrix units, else fp32); double quantization on CUDA only, because
bitsandbytes' CPU backend does not support it.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
from collections.abc import Callable, Iterator
from typing import Any

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


@contextlib.contextmanager
def dequantized_weights(model: torch.nn.Module) -> Iterator[dict[str, int]]:
    """Within the block, every CPU NF4 layer (`bnb.nn.Linear4bit`) of `model` multiplies by a weight
    dequantized once, at its first forward, instead of dequantizing on every forward; on leaving, the
    layers' own `forward` is back and the dequantized copies are freed.

    bitsandbytes' CPU path (`matmul_4bit` without autograd -> `gemm_4bit`'s default kernel) dequantizes
    the whole weight to the input's dtype and calls `F.linear` on every call: while generating, that is
    once per layer per new token, whatever the batch (BENCHMARKS.md, "Graded evaluation cost"). Here the
    same dequantization (`torch.ops.bitsandbytes.dequantize_4bit` to the same dtype) and the same
    `F.linear` run, so outputs are bit-identical to the plain forward. Cost: the decoder's linear weights
    in the compute dtype for the block's duration (SmolLM2-135M: 106M weights, 212 MB in bf16, 425 MB in
    fp32). For inference only: the cached forward has no autograd path to the base weight, which is
    frozen anyway, and the block must not train (it raises RuntimeError if a forward runs with grad
    enabled on an input that requires it). CUDA layers (fused kernels) are left as they are.

    Yields {"layers": layers patched, "cached": layers whose weight was dequantized so far} (read after
    the block for how many were used)."""
    stats = {"layers": 0, "cached": 0}
    if not is_bnb_available():
        yield stats
        return
    import bitsandbytes as bnb

    layers: list[Any] = [m for m in model.modules() if isinstance(m, bnb.nn.Linear4bit)]
    patched = [m for m in layers if m.weight.device.type == "cpu" and getattr(m.weight, "quant_state", None) is not None
               and not getattr(m.weight.quant_state, "nested", False)]
    try:
        for module in patched:
            module.forward = _cached_forward(module, stats)
        stats["layers"] = len(patched)
        yield stats
    finally:
        for module in patched:
            module.__dict__.pop("forward", None)


def _cached_forward(module: Any, stats: dict[str, int]) -> Callable[[torch.Tensor], torch.Tensor]:
    """`Linear4bit.forward` with its weight dequantized once (see `dequantized_weights`)."""
    state = module.weight.quant_state
    cache: dict[torch.dtype, torch.Tensor] = {}

    def forward(x: torch.Tensor) -> torch.Tensor:
        if torch.is_grad_enabled() and x.requires_grad:
            raise RuntimeError("dequantized_weights is for inference: a forward ran with autograd on")
        inp_dtype = x.dtype
        compute = getattr(module, "compute_dtype", None)
        if compute is not None:
            x = x.to(compute)
        if x.dtype not in cache:
            packed = module.weight.data.view(-1, 1)
            cache[x.dtype] = torch.ops.bitsandbytes.dequantize_4bit.default(
                packed, state.absmax, state.blocksize, state.quant_type, state.shape, x.dtype)
            stats["cached"] += 1
        bias = module.bias
        if bias is not None:
            bias = bias.to(x.dtype)
        return torch.nn.functional.linear(x, cache[x.dtype], bias).to(inp_dtype)

    return forward
