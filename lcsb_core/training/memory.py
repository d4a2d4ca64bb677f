"""Predict the peak memory (MiB) of a training run before it starts, from the model's config.json and
the job spec. Pure Python (no torch import), so the API process can route jobs by it.

Model (bytes; B batch, T sequence length, N = B*T target tokens at most, H hidden, I intermediate,
V vocab, L decoder layers):

    runtime      process baseline of a training process: Python + torch + transformers + PEFT +
                 bitsandbytes, the tokenizer, datasets, matplotlib and the worker child's service
                 imports (CPU: 800 MiB; a bare training loop measured 450 MiB after import, a small
                 SmolLM2 job in the worker child peaked 1,414 MiB vs 929 MiB predicted with 450;
                 CUDA: context + allocator reserve, 600 MiB)
    weights      NF4: 0.5 B/param + one fp32 absmax per 64-weight block for the decoder linears, bf16
                 for embeddings/norms; bf16: 2 B/param; fp32: 4 B/param
    lora_state   LoRA parameters x 20 B: fp32 weight, fp32 grad (zero tensors for skipped layers),
                 AdamW m and v, and the history's pre-step snapshot
    activations  (layers that keep autograd state) x B*T x (24 H + 12 I) B, plus the LM head's saved
                 logits 9 B x N x V. Layers that keep state: full -> L; freeze -> L (worst block: the
                 lowest, everything above it is back-propagated); LCSB -> k; split -> see split. With
                 gradient checkpointing a kept layer stores only its input (4 H B/token) and one layer
                 is recomputed at a time; with `recompute_deep` (k-layer schedules' deeper steps) the
                 top k keep theirs and the layers below store only their input.
    transient    the logits' gradient (4 B x N x V) plus 8 layers' worth of per-token buffers
                 (backward temporaries, allocator slack)
    chunked head with `loss_chunk_bytes` C > 0 (`TrainConfig.loss_chunk_mib`, `lcsb_core.training.loss.HeadLossSum`):
                 the head keeps no logits for backward, only the [N, H] gradient of its input (4 B x N x
                 H in activations), and its transient is one chunk's buffers, `HEAD_CHUNK_BUFFERS` x C
                 (fp32 logits, their softmax, its gradient, the bf16 copy under autocast), in either
                 compute dtype; on by default (`TrainConfig.loss_chunk_mib` 16). Measured (estimate /
                 peak) on every configuration of bench/memory_fit.py: SmolLM2 fp32 0.90-1.30, bf16
                 0.95-1.20 (with `FP32_ACTIVATION_SCALE` refitted); Gemma cyclic 4 x 256 fp32 on an AVX2
                 CPU 1.17x and 1.30x, bf16 its training terms 1.11x (1,643 MiB; 4,603 unchunked), its
                 loading term 1.25x
    split        a depth split (`split`, `DepthSplit`) runs two passes one after the other, each a
                 forward and backward per micro-batch (`lcsb_core.training.step.run_step`): the deep pass with
                 B_d = min(B, D) rows x all L layers, then the shallow pass with B_s = min(B, W - D)
                 rows x the top k (W = B x gradient_accumulation_steps rows a step, D =
                 `lcsb_core.training.schedules.deep_rows(W, deep_fraction)`). Activations and transient are
                 those of the pass whose sum of the two is larger, each pass's terms with its own
                 rows (B_d*T or B_s*T tokens, the LM head's included): max(pass(B_d, L), pass(B_s, k)).
                 The first pass leaves behind only the LoRA gradients of every layer, which
                 lora_state already holds, and the C allocator's free pages, which the shallow pass
                 mostly reuses: on SmolLM2 NF4 4 x 256 (bf16, a second step's peak over the resident
                 set before it) the split step peaked at 758-785 MiB, its shallow pass alone at 680
                 and its deep pass alone at 474; this model gives 846 + 19 (gradients), so the
                 transient term's slack covers what the deep pass leaves.
    loading      the peak while loading: runtime + the checkpoint files (memory-mapped) + weights x 2
    evaluation   graded evaluation (`method.eval`), between steps: runtime + weights + lora_state + the
                 KV cache of one `generate` call (G = `generation_tokens` x L x 2 x kv heads x head dim
                 x 2 or 4 B) + on a CPU NF4 base the decoder's linear weights dequantized once
                 (`quantization.dequantized_weights`: linear params x 2 or 4 B) + one layer's
                 per-token buffers for G tokens (the prompt's forward)
    The run's peak is the largest of loading, training and evaluation.
    DPO          (`TrainConfig.dpo`) a micro-batch of B pairs is 2B rows (each pair's two answers), so every
                 term above takes 2B rows (and a split's windows count rows of whole pairs); the
                 reference's forward runs before the policy's without autograd (one layer's buffers and
                 one head chunk at a time), inside the training pass's transient.

The per-token coefficients were measured on SmolLM2-135M (NF4, bf16 autocast) with
`torch.autograd.graph.saved_tensors_hooks`: 31.5 MiB per decoder layer per 1,024 tokens and 436 MiB for
the LM head at 1,024 targets (see bench/step_time.py, column "saved act."). tests/core/test_memory.py
holds the prediction between 0.8x and 1.6x of measured peaks on CPU (it was +-25 % on the AVX-512
machine; see the test for why the band is wider).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from lcsb_core.models.shapes import parameter_count, projection_shapes

if TYPE_CHECKING:
    from lcsb_core.training.config import TrainConfig
    from lcsb_core.training.schedules import Schedule

MIB = 1024 * 1024
RUNTIME_MIB = {"cpu": 800.0, "cuda": 600.0}
#: How far each device's estimate is known to hold: what `MemoryEstimate.basis` tells a user and an
#: operator packing jobs (worker classes' `max_concurrent_jobs`) before they trust it.
BASIS = {
    "cpu": "fitted to measured CPU peaks: within 0.8x-1.6x of them (tests/core/test_memory.py)",
    "cuda": "not fitted on a GPU yet: the one CUDA job measured peaked at 991 MiB against 2,496 MiB estimated; "
            "kept on the safe side (it over-reserves) until a GPU refit (issue 36)",
}
NF4_BYTES_PER_PARAM = 0.5 + 4 / 64
HEAD_CHUNK_BUFFERS = 4
"""Chunk-sized buffers alive at once in a chunk of the chunked LM head (see the module docstring)."""
FP32_ACTIVATION_SCALE = 1.6
"""Per-layer activations and transients in fp32 compute relative to the bf16-autocast coefficients:
not 2x, because under bf16 autocast autograd also keeps fp32 copies beside the bf16 tensors. Refitted
(issue 30) to the 18 fp32 peaks of bench/memory_fit.py (tests/core/test_memory.py's nine configurations,
unchunked and with the chunked LM head, fp32 forced on an AVX512-BF16 CPU, whose fp32 peaks match an
AVX2 CPU's within that CPU's run-to-run spread): estimate / peak 0.90-1.30 (median 1.10) with 1.6; the
earlier 1.25, fitted mostly on k = 8 steps, gave 0.82-1.24 and under-counted full-depth steps (full
backprop with chunks 0.82, `tail` 0.85). BENCHMARKS.md, "The chunked LM head"."""


@dataclass(frozen=True)
class DepthSplit:
    """The two forward/backward passes of a `split` step, per micro-batch: `deep_rows` rows through all
    of the step's back-propagated layers, then `shallow_rows` rows (0: no shallow pass) through
    `shallow_layers` decoder layers (`depth_split_for` derives it from a schedule)."""

    deep_rows: int
    shallow_rows: int
    shallow_layers: int


def depth_split_for(schedule: Schedule, *, batch_size: int, accumulation_steps: int) -> DepthSplit | None:
    """The passes of a step of `schedule` with `batch_size` rows per micro-batch and `accumulation_steps`
    micro-batches a step, as `lcsb_core.training.step.run_step` runs them: `split_rows` takes the window's first
    D = `deep_rows(W, deep_fraction)` of its W rows across micro-batches, so a deep micro-batch holds
    at most min(B, D) rows and a shallow one at most min(B, W - D). None where every example of a step
    back-propagates the same layers (no `deep_fraction`, or shallow layers equal to all of them)."""
    from lcsb_core.training.schedules import deep_rows

    if schedule.deep_fraction is None:
        return None
    steps = range(schedule.cycle_length)
    if all(schedule.shallow_layers(t) == schedule.layers_for_step(t) for t in steps):
        return None
    window = batch_size * accumulation_steps
    deep = deep_rows(window, schedule.deep_fraction)
    # exact gradient: the shallow pass back-propagates from its lowest layer to the top
    shallow = max(len(schedule.shallow_layers(t)) if schedule.identity_skip
                  else schedule.num_layers - min(schedule.shallow_layers(t)) for t in steps)
    return DepthSplit(min(batch_size, deep), min(batch_size, window - deep), shallow)


@dataclass
class MemoryEstimate:
    """Predicted peak memory by component, MiB; `basis`: how far the estimate is known to hold on its
    device (`BASIS`)."""

    runtime_mib: float
    weights_mib: float
    lora_state_mib: float
    activations_mib: float
    transient_mib: float
    lora_parameters: int
    loading_mib: float = 0.0
    evaluation_mib: float = 0.0
    basis: str = BASIS["cpu"]

    @property
    def training_mib(self) -> float:
        return self.runtime_mib + self.weights_mib + self.lora_state_mib + self.activations_mib + self.transient_mib

    @property
    def total_mib(self) -> float:
        """The predicted peak: max(loading, training, evaluation)."""
        return max(self.training_mib, self.loading_mib, self.evaluation_mib)

    def to_dict(self) -> dict:
        return {**asdict(self), "training_mib": round(self.training_mib, 1), "total_mib": round(self.total_mib, 1)}


def estimate_peak_mib(model_config: dict, *, quantization: str, lora_rank: int, target_modules: tuple[str, ...],
                      batch_size: int, seq_len: int, backprop_layers: int | None, depth_split: DepthSplit | None,
                      gradient_checkpointing: bool, device: str, checkpoint_bytes: int = 0,
                      loss_chunk_bytes: int, recompute_top: int | None, compute_dtype: str | None = None,
                      generation_tokens: int = 0) -> MemoryEstimate:
    """Predicted peak memory of one training process (CPU: resident set; CUDA: allocated + context).
    The job's settings have no defaults here: `estimate_for` reads them from a `TrainConfig`, whose
    dataclasses are their one home.

    Args:
        model_config: the model's config.json as a dict (hidden_size, intermediate_size,
            num_hidden_layers, num_attention_heads, num_key_value_heads, vocab_size, tie_word_embeddings).
        quantization, lora_rank, target_modules, batch_size, gradient_checkpointing: as in `TrainConfig`
            (`model.quantization`, `lora.rank`, `lora.target_modules`, `batch_size`,
            `lcsb.gradient_checkpointing`).
        backprop_layers: the most decoder layers one step back-propagates, whose activations it keeps
            (`Schedule.max_backprop_layers()`); None means all L (full backprop).
        depth_split: a `split` step's two passes (`depth_split_for`): the deep one keeps
            `backprop_layers` for `deep_rows` rows, the shallow one `shallow_layers` for `shallow_rows`,
            and the larger sets activations and transient; None: one pass of `batch_size` rows.
        seq_len: tokens per example after truncation (the job's max_seq_len is the safe bound).
        device: `cpu` or `cuda[:N]` (the runtime baseline; with `compute_dtype` None, the assumed dtype).
        checkpoint_bytes: size of the model's weight files (0: loading not modelled).
        compute_dtype: `bf16` or `fp32`, what an NF4 base computes in (`lcsb_core.models.quantization.
            compute_dtype`); None: `assumed_compute_dtype(device)`. fp32 doubles the non-quantized
            base tensors and scales the per-layer activations by `FP32_ACTIVATION_SCALE`.
        recompute_top: with `LCSBSettings.recompute_deep`, the schedule's k: a pass keeping more than
            k layers keeps k layers' activations, the inputs of the others (4 H B/token) and one layer
            recomputed at a time (`lcsb_core.training.selective.recompute_below_top`); None: no such recomputation.
        loss_chunk_bytes: the chunked LM head's chunk (`TrainConfig.loss_chunk_mib` in bytes); 0: the
            head over all targets at once, its logits and their gradient alive together.
        generation_tokens: tokens one graded-evaluation `generate` call holds
            (`EvalSettings.generation_tokens`); 0: the run has no graded evaluation.

    Raises:
        KeyError: the config lacks one of the fields above.
    """
    L, h, i, v = (model_config[x] for x in ("num_hidden_layers", "hidden_size", "intermediate_size", "vocab_size"))
    shapes = projection_shapes(model_config)
    linear_params, other_params = parameter_count(model_config)
    if quantization == "nf4":
        compute_dtype = compute_dtype or assumed_compute_dtype(device)
        act_scale = FP32_ACTIVATION_SCALE if compute_dtype == "fp32" else 1.0
        weights = linear_params * NF4_BYTES_PER_PARAM + other_params * (4 if compute_dtype == "fp32" else 2)
    else:
        act_scale = FP32_ACTIVATION_SCALE if quantization == "fp32" else 1.0
        weights = (linear_params + other_params) * (4 if quantization == "fp32" else 2)
    lora_params = L * sum(lora_rank * (a + b) for name, (a, b) in shapes.items() if name in target_modules)
    kept = L if backprop_layers is None else min(backprop_layers, L)

    def one_pass(rows: int, layers: int) -> tuple[float, float]:
        """(activations, transient) bytes of a forward/backward of `rows` rows keeping `layers` layers."""
        tokens = rows * seq_len
        per_layer = tokens * (24 * h + 12 * i) * act_scale
        if gradient_checkpointing:  # each kept layer stores its input; one layer is recomputed at a time
            layer_act = layers * tokens * 4 * h * act_scale + per_layer
        elif recompute_top is not None and layers > recompute_top:  # the top k whole, the others their input
            layer_act = recompute_top * per_layer + (layers - recompute_top) * tokens * 4 * h * act_scale + per_layer
        else:
            layer_act = layers * per_layer
        if loss_chunk_bytes:
            chunk = HEAD_CHUNK_BUFFERS * min(loss_chunk_bytes, 4 * tokens * v)
            return layer_act + 4 * tokens * h, chunk + 8 * per_layer
        return layer_act + 9 * tokens * v, 4 * tokens * v + 8 * per_layer

    passes = [(batch_size, kept)] if depth_split is None else \
        [(depth_split.deep_rows, kept), (depth_split.shallow_rows, min(depth_split.shallow_layers, L))]
    activations, transient = max((one_pass(rows, layers) for rows, layers in passes if rows), key=sum)
    runtime = RUNTIME_MIB["cuda" if device.startswith("cuda") else "cpu"]
    evaluation = 0.0
    if generation_tokens:
        act_bytes = 4 if act_scale != 1.0 else 2
        heads = model_config["num_attention_heads"]
        kv_width = (model_config.get("num_key_value_heads") or heads) * (model_config.get("head_dim") or h // heads)
        dequantized = linear_params * act_bytes if quantization == "nf4" and not device.startswith("cuda") else 0
        evaluation = (runtime * MIB + weights + lora_params * 20 + generation_tokens * L * 2 * kv_width * act_bytes
                      + dequantized + generation_tokens * (24 * h + 12 * i) * act_scale) / MIB
    return MemoryEstimate(
        runtime_mib=runtime,
        weights_mib=weights / MIB,
        lora_state_mib=lora_params * 20 / MIB,
        activations_mib=activations / MIB,
        transient_mib=transient / MIB,
        lora_parameters=lora_params,
        loading_mib=runtime + (checkpoint_bytes + 2 * weights) / MIB if checkpoint_bytes else 0.0,
        evaluation_mib=evaluation,
        basis=BASIS["cuda" if device.startswith("cuda") else "cpu"],
    )


def assumed_compute_dtype(device: str) -> str:
    """What an NF4 job is assumed to compute in where the process cannot look at the hardware (the
    API routing to a worker class): `bf16` on CUDA; `fp32` on CPU, the larger of the two, because a
    CPU without bf16 matrix units computes in fp32 (`lcsb_core.models.quantization.compute_dtype`)."""
    return "bf16" if device.startswith("cuda") else "fp32"


def estimate_for(cfg: TrainConfig, model_config: dict, *, device: str, checkpoint_bytes: int = 0,
                 compute_dtype: str | None = None) -> MemoryEstimate:
    """`estimate_peak_mib` for a `TrainConfig` on a model whose config.json is `model_config`: the one
    mapping from a job's settings to the estimate (quantization, LoRA rank and targets, batch size,
    `max_seq_len` as the sequence bound, the schedule's deepest backward and `split`'s two passes,
    gradient checkpointing), used by `lcsb estimate-memory` and by the service's routing to a worker class.

    Raises:
        KeyError: `model_config` lacks a field `estimate_peak_mib` reads.
        ConfigError: the schedule settings are invalid for this model (e.g. `lcsb.k` above its layers).
    """

    schedule = cfg.lcsb.schedule_for(num_layers=model_config["num_hidden_layers"])
    rows = cfg.batch_size * (1 if cfg.dpo is None else 2)  # DPO: both answers of each pair
    return estimate_peak_mib(model_config, quantization=cfg.model.quantization, lora_rank=cfg.lora.rank,
                             target_modules=tuple(cfg.lora.target_modules), batch_size=rows,
                             seq_len=cfg.data.max_seq_len, backprop_layers=schedule.max_backprop_layers(),
                             depth_split=depth_split_for(schedule, batch_size=rows,
                                                         accumulation_steps=cfg.gradient_accumulation_steps),
                             gradient_checkpointing=cfg.lcsb.gradient_checkpointing, device=device,
                             loss_chunk_bytes=cfg.loss_chunk_mib * MIB,
                             recompute_top=schedule.k if cfg.lcsb.recompute_deep else None,
                             checkpoint_bytes=checkpoint_bytes, compute_dtype=compute_dtype,
                             generation_tokens=cfg.eval.generation_tokens(cfg.data.max_seq_len) if cfg.eval else 0)


def estimate_for_config(cfg: TrainConfig) -> MemoryEstimate:
    """Estimate for a `TrainConfig` (reads the model folder's config.json; resolves k from the fraction).

    Raises:
        ModelLoadError: the model folder cannot be found.
    """
    from lcsb_core.models.loading import resolve_model_path

    folder = Path(resolve_model_path(cfg.model.name_or_path))
    model_config = json.loads((folder / "config.json").read_text())
    files = (sum(f.stat().st_size for f in folder.glob("*.safetensors"))
             or sum(f.stat().st_size for f in folder.glob("*.bin")))
    device = "cpu" if cfg.model.device in ("cpu", "auto") else cfg.model.device
    import torch

    from lcsb_core.models.quantization import compute_dtype

    dtype = "fp32" if compute_dtype(torch.device(device)) == torch.float32 else "bf16"
    return estimate_for(cfg, model_config, device=device, checkpoint_bytes=files, compute_dtype=dtype)
