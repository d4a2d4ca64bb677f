"""Causal-LM loss summed over target tokens, computing the LM head only where a label exists.

The LM head of a small model is a large share of its compute (SmolLM2-135M: 49,152 x 576, about 21 %
of the FLOPs of a forward), and only target positions need logits; slicing the hidden states to those
positions before the head saves that work for prompt tokens and padding, in forward and backward.
Sums (not means) are returned so the trainer can divide by the target-token count of the whole
gradient-accumulation window (the loss is a mean over target tokens, not a mean of micro-batch means).

With `chunk_bytes` > 0 passed to `lm_loss_sums` (the trainer passes `TrainConfig.loss_chunk_mib`, 16 MiB
by default; `lcsb_core.training.memory` models the chunked head: its [N, hidden] gradient and one chunk's buffers) and
autograd recording, the head and the cross-entropy run over chunks of target positions whose fp32 logits take
at most that many bytes (16 MiB: 85 positions at SmolLM2's 49,152-token vocabulary, 16 at Gemma-3's
262,144), and each chunk's gradient with respect to its hidden states is taken right away, inside the
forward (`HeadLossSum`; the technique of Liger-Kernel's fused linear cross-entropy, here with
autograd's own kernels instead of custom ones). Backward then only scales the stored [N, hidden]
gradient. So the [N, vocab] logits (SmolLM2, 4 x 256 targets: 1,020 x 49,152 fp32 = 192 MiB; with the
softmax and their gradients about 800 MiB a step) are never alive at once, and no GEMM is recomputed.
The chunk's buffers stay under glibc's mmap threshold, so the C heap can reuse them instead of mapping
and faulting in fresh pages every step (1.4-1.5 s per GiB on this project's VMs). Each position's loss
and gradient are computed by the same ops as without chunks; only the loss's summation order
differs. Measured in bench/page_faults.py (until commit f538568; bench/LOG.md, BENCHMARKS.md 1f). The
LM head must be frozen (LoRA adapts the decoder's projections only); a trainable head gets the unchunked
loss. `skip_below` > 0 (off in the product; measured in bench/head_filter.py, BENCHMARKS.md) replaces a
chunk's autograd backward by `filtered_chunk`, which skips the gradient GEMM for vocabulary blocks whose
logit gradient is below the threshold at every position of the chunk.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import cast

import torch
import torch.nn.functional as F
from torch import nn

from lcsb_core.models.modules import autocast_for, causal_lm

IGNORE_INDEX = -100


@dataclass
class LossSums:
    """Per-batch sums: `loss_sum` (nats, 0-dim tensor, differentiable), `num_targets` and `num_correct`
    (tokens whose argmax prediction equals the label)."""

    loss_sum: torch.Tensor
    num_targets: int
    num_correct: int


def lm_loss_sums(model: nn.Module, batch: dict[str, torch.Tensor], *, with_accuracy: bool = False,
                 chunk_bytes: int = 0, skip_below: float = 0.0) -> LossSums:
    """Forward `batch` (input_ids/labels [B, T] long, attention_mask [B, T] or a 4-D mask, optional
    position_ids [B, T]) and return the summed next-token cross-entropy over positions whose label is
    not -100. Labels are unshifted (label t is predicted from position t-1), as in transformers.
    `with_accuracy` also counts argmax hits (an extra pass over the [N, vocab] logits: eval only).
    Call inside `autocast_for(model)` for bf16 bases. A config's `final_logit_softcapping` is applied
    as the model's own forward does (`cap * tanh(logits / cap)`). With `chunk_bytes` > 0 (bytes of fp32
    logits per chunk; 0, the default, runs the head over all target positions at once) the head runs in
    chunks of positions, their gradients taken during the forward when autograd records (module
    docstring). `skip_below` > 0 (chunks only) skips the head's gradient for vocabulary blocks whose logit
    gradient is below it at every position of a chunk (`filtered_chunk`). Raises ValueError for a
    negative `chunk_bytes`."""
    lm = causal_lm(model)
    kwargs = {k: batch[k] for k in ("attention_mask", "position_ids") if k in batch}
    hidden = lm.get_decoder()(input_ids=batch["input_ids"], use_cache=False, **kwargs).last_hidden_state
    targets = batch["labels"][:, 1:]
    mask = targets != IGNORE_INDEX
    picked = hidden[:, :-1][mask]  # [N, hidden]
    tgt = targets[mask]  # [N]
    head = lm.get_output_embeddings()
    cap = getattr(lm.config, "final_logit_softcapping", None)  # Gemma-2 (30.0); None for Gemma-3, Llama
    vocab_bytes = head.weight.shape[0] * 4
    if chunk_bytes < 0:
        raise ValueError(f"chunk_bytes: must be >= 0 (0 = no chunks), got {chunk_bytes}")
    size = max(chunk_bytes // vocab_bytes, 1) if chunk_bytes else max(int(tgt.numel()), 1)
    if tgt.numel() == 0:  # no targets: a zero that still reaches the graph, as cross_entropy's empty sum did
        return LossSums(picked.float().sum() * 0.0, 0, 0)
    if chunk_bytes and picked.requires_grad and torch.is_grad_enabled() and \
            not any(p.requires_grad for p in head.parameters()):
        return LossSums(HeadLossSum.apply(picked, tgt, head, cap, size, skip_below), int(tgt.numel()), 0)
    loss_sum, num_correct = picked.new_zeros((), dtype=torch.float32), 0
    for i in range(0, int(tgt.numel()), size):
        logits = _logits(head, cap, picked[i:i + size])
        loss_sum = loss_sum + F.cross_entropy(logits, tgt[i:i + size], reduction="sum")
        num_correct += int((logits.detach().argmax(-1) == tgt[i:i + size]).sum()) if with_accuracy else 0
    return LossSums(loss_sum, int(tgt.numel()), num_correct)


def _logits(head: nn.Module, cap: float | None, hidden: torch.Tensor) -> torch.Tensor:
    """fp32 logits [n, vocab] of `hidden` [n, d], soft-capped as the model's own forward does."""
    logits = head(hidden).float()
    return torch.tanh(logits / cap) * cap if cap else logits


class HeadLossSum(torch.autograd.Function):
    """Summed cross-entropy of a frozen LM head over chunks of positions, with each chunk's gradient taken
    during the forward (module docstring). `apply(hidden, tgt, head, cap, size, skip_below)`: `hidden`
    [N, d] (the decoder's output at target positions, any float dtype), `tgt` [N] token ids, `head` the
    frozen output embedding, `cap` the final-logit soft cap or None, `size` positions per chunk,
    `skip_below` 0.0 (exact: autograd's own backward of the chunk) or a threshold for `filtered_chunk`.
    Returns a 0-dim fp32 loss sum (nats); backward gives `hidden` grad_output x the stored [N, d]
    gradient, nothing else."""

    @staticmethod
    def forward(ctx, hidden: torch.Tensor, tgt: torch.Tensor, head: nn.Module, cap: float | None,
                size: int, skip_below: float = 0.0) -> torch.Tensor:
        grad = torch.empty_like(hidden)
        total = torch.zeros((), dtype=torch.float32, device=hidden.device)
        for i in range(0, hidden.shape[0], size):
            h = hidden[i:i + size].detach()
            if skip_below > 0:
                chunk, grad[i:i + size] = filtered_chunk(h, tgt[i:i + size], head, cap, skip_below)[:2]
            else:
                with torch.enable_grad():
                    h.requires_grad_(True)
                    chunk = F.cross_entropy(_logits(head, cap, h), tgt[i:i + size], reduction="sum")
                    grad[i:i + size] = torch.autograd.grad(chunk, h)[0]
            total += chunk.detach()
        ctx.save_for_backward(grad)
        return total

    @staticmethod
    def backward(ctx, grad_output: torch.Tensor):
        (grad,) = ctx.saved_tensors
        return grad * grad_output.to(grad.dtype), None, None, None, None, None


VOCAB_BLOCK = 1024  # vocabulary rows per block that `filtered_chunk` keeps or skips


@torch.no_grad()
def filtered_chunk(hidden: torch.Tensor, tgt: torch.Tensor, head: nn.Module, cap: float | None,
                   skip_below: float) -> tuple[torch.Tensor, torch.Tensor, float]:
    """Summed cross-entropy of one chunk and its gradient with respect to `hidden` [n, d], skipping the
    vocabulary blocks (`VOCAB_BLOCK` rows of the head) whose logit gradient (softmax - onehot, times the
    soft cap's derivative) is below `skip_below` in magnitude at every position of the chunk: their rows
    of the head weight are never read for the gradient GEMM (Cut Cross-Entropy's gradient filtering,
    Wijmans et al. 2024). Returns (loss sum, 0-dim fp32; gradient [n, d] in `hidden`'s dtype; share of
    blocks skipped). The loss is exact; the gradient differs from the exact one by at most
    `skip_below` x (skipped columns) x |W| per position."""
    logits = _logits(head, cap, hidden)  # [n, V] fp32
    lse = torch.logsumexp(logits, dim=-1, keepdim=True)
    rows = torch.arange(tgt.numel(), device=tgt.device)
    loss = (lse.squeeze(1) - logits[rows, tgt]).sum()
    # d(cap * tanh(l / cap)) / dl = 1 - tanh^2 = 1 - (z / cap)^2, z the capped logit
    slope = 1.0 - (logits / cap) ** 2 if cap else None
    g = logits.sub_(lse).exp_()  # softmax, in the logits' buffer
    g[rows, tgt] -= 1.0
    if slope is not None:
        g.mul_(slope)
    weight = cast(torch.Tensor, head.weight)
    vocab = g.shape[1]
    full = vocab // VOCAB_BLOCK * VOCAB_BLOCK
    peak = g[:, :full].abs().view(g.shape[0], -1, VOCAB_BLOCK).amax(dim=(0, 2))  # [blocks]
    keep = (peak >= skip_below).tolist() + ([True] if full < vocab else [])
    out = torch.zeros(hidden.shape, dtype=torch.float32, device=hidden.device)
    gw = g.to(weight.dtype)
    start = None
    for b, kept in enumerate(keep + [False]):  # contiguous runs of kept blocks: one GEMM each
        if kept and start is None:
            start = b
        elif not kept and start is not None:
            lo, hi = start * VOCAB_BLOCK, min(b * VOCAB_BLOCK, vocab)
            out += (gw[:, lo:hi] @ weight[lo:hi]).float()
            start = None
    return loss, out.to(hidden.dtype), 1.0 - sum(keep) / len(keep)


@dataclass(frozen=True)
class EvalTotals:
    """Totals of an evaluation: `loss_sum` (nats), `num_targets` and `num_correct` (tokens)."""

    loss_sum: float
    num_targets: int
    num_correct: int

    @property
    def mean_loss(self) -> float:
        """Eval loss: mean nats per target token (0.0 with no targets)."""
        return self.loss_sum / max(self.num_targets, 1)

    @property
    def token_accuracy(self) -> float:
        """Share of target tokens whose argmax prediction is the label (0.0 with no targets)."""
        return self.num_correct / max(self.num_targets, 1)


@torch.no_grad()
def evaluate_batches(model: nn.Module, batches: Iterable[dict[str, torch.Tensor]], *,
                     with_accuracy: bool = True, on_batch: Callable[[int], None] | None = None) -> EvalTotals:
    """Sum `lm_loss_sums` over `batches` (each as `lm_loss_sums` takes it) in eval mode (dropout off),
    under `autocast_for(model)`, without autograd; the model is back in train mode afterwards. The
    loss is summed over tokens, so the mean is per target token, not per batch. `on_batch(n)` is
    called after the n-th batch (n = 1, 2, ...)."""
    model.eval()
    loss_sum, targets, correct = 0.0, 0, 0
    try:
        for n, batch in enumerate(batches, start=1):
            with autocast_for(model):
                sums = lm_loss_sums(model, batch, with_accuracy=with_accuracy)
            loss_sum += float(sums.loss_sum)
            targets, correct = targets + sums.num_targets, correct + sums.num_correct
            if on_batch is not None:
                on_batch(n)
    finally:
        model.train()
    return EvalTotals(loss_sum, targets, correct)
