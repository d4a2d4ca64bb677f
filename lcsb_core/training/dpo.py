"""DPO, the preference objective (Rafailov et al., "Direct Preference Optimization", arXiv 2305.18290),
with the sigmoid loss of TRL's `DPOTrainer` (`loss_type="sigmoid"`, no label smoothing):

    loss = -log sigmoid(beta * ((log pi(y_w|x) - log ref(y_w|x)) - (log pi(y_l|x) - log ref(y_l|x))))

per pair, where log pi(y|x) is the summed log-probability of the answer's tokens given the prompt (the
prompt's tokens are masked: their labels are -100) and `ref` is the reference model: the same model
with the LoRA adapter switched off (PEFT `disable_adapter`, no second copy of the base) for a run that
starts from a fresh adapter, or the run's starting adapter frozen (`FrozenAdapterReference`) for a run
that continues an adapter (`TrainConfig.init_adapter`: the SFT-then-DPO recipe).

A batch of pairs is laid out row by row as [chosen_0, rejected_0, chosen_1, rejected_1, ...] (the order
of `TokenizedDataset.examples` for preference data and of `lcsb_core.data.pairs.iter_pair_batches`), so
any slice of whole pairs is a batch again (the depth split `split` cuts windows by pairs).

The log-probabilities use the chunked LM head's technique (`lcsb_core.training.loss.HeadLossSum`): the head runs
over chunks of answer positions whose fp32 logits take at most `chunk_bytes`, each chunk's gradient with
respect to its hidden states taken during the forward (`HeadLogProbs`), so the [tokens, vocabulary]
logits (Gemma-3: 262,144 columns) are never alive at once. A selected decoder layer gets the exact
gradient of the DPO loss: the loss is an ordinary differentiable function of the per-row sums.

Metrics use TRL's names: `rewards/chosen` (mean over pairs of beta * (log pi(y_w) - log ref(y_w))),
`rewards/rejected`, `rewards/margins` (mean of their difference) and `rewards/accuracies` (share of pairs
whose chosen reward is above the rejected one, a tie counting one half: TRL counts a tie as wrong, which
differs only where policy and reference agree exactly, as at step 0, where this gives chance, 50 %, and
TRL's 0 %).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from lcsb_core.models.modules import autocast_for, causal_lm
from lcsb_core.training.lora import adapter_is_identity
from lcsb_core.training.loss import IGNORE_INDEX, _logits

REWARD_KEYS = ("rewards/chosen", "rewards/rejected", "rewards/margins", "rewards/accuracies")
"""The reward metrics of a DPO step or evaluation, by TRL's names (an evaluation's carry `eval_` in front)."""


class HeadLogProbs(torch.autograd.Function):
    """Per-position log-probability of the target token under a frozen LM head, over chunks of positions,
    each chunk's gradient taken during the forward. `apply(hidden, tgt, head, cap, size)`: `hidden` [N, d]
    (the decoder's output at target positions), `tgt` [N] token ids, `head` the frozen output embedding,
    `cap` the final-logit soft cap or None, `size` positions per chunk. Returns [N] fp32 log-probabilities
    (nats, <= 0); backward gives `hidden` grad_output[:, None] x the stored [N, d] gradient (exact: each
    position's log-probability depends on its own hidden state only)."""

    @staticmethod
    def forward(ctx, hidden: torch.Tensor, tgt: torch.Tensor, head: nn.Module, cap: float | None,
                size: int) -> torch.Tensor:
        grad = torch.empty_like(hidden)
        out = torch.empty(hidden.shape[0], dtype=torch.float32, device=hidden.device)
        for i in range(0, hidden.shape[0], size):
            h = hidden[i:i + size].detach()
            with torch.enable_grad():
                h.requires_grad_(True)
                logp = -F.cross_entropy(_logits(head, cap, h), tgt[i:i + size], reduction="none")
                grad[i:i + size] = torch.autograd.grad(logp.sum(), h)[0]
            out[i:i + size] = logp.detach()
        ctx.save_for_backward(grad)
        return out

    @staticmethod
    def backward(ctx, grad_output: torch.Tensor):
        (grad,) = ctx.saved_tensors
        return grad * grad_output[:, None].to(grad.dtype), None, None, None, None


def answer_logps(model: nn.Module, batch: dict[str, torch.Tensor], *, chunk_bytes: int = 0,
                 hits: list[int] | None = None) -> torch.Tensor:
    """Summed log-probability of each row's target tokens (labels != -100, unshifted as in transformers)
    given the tokens before them: [rows] fp32 (nats), differentiable when autograd records. `batch`:
    input_ids / labels / attention_mask [rows, T] (right padding). With `chunk_bytes` > 0 and autograd
    recording, the head runs in chunks (`HeadLogProbs`); otherwise over chunks of that size (or all
    positions at once) without storing gradients. Call inside `autocast_for(model)` for bf16 bases.
    `hits` (without autograd only): a list that gets [target tokens of the chosen rows (even rows), of them
    those whose argmax prediction is the label] appended.

    Raises:
        ValueError: a negative `chunk_bytes`.
    """
    if chunk_bytes < 0:
        raise ValueError(f"chunk_bytes: must be >= 0 (0 = no chunks), got {chunk_bytes}")
    lm = causal_lm(model)
    kwargs = {k: batch[k] for k in ("attention_mask", "position_ids") if k in batch}
    hidden = lm.get_decoder()(input_ids=batch["input_ids"], use_cache=False, **kwargs).last_hidden_state
    targets = batch["labels"][:, 1:]
    mask = targets != IGNORE_INDEX
    rows = torch.arange(targets.shape[0], device=targets.device)[:, None].expand_as(targets)[mask]  # [N]
    picked, tgt = hidden[:, :-1][mask], targets[mask]
    head = lm.get_output_embeddings()
    cap = getattr(lm.config, "final_logit_softcapping", None)
    vocab_bytes = head.weight.shape[0] * 4
    size = max(chunk_bytes // vocab_bytes, 1) if chunk_bytes else max(int(tgt.numel()), 1)
    if chunk_bytes and picked.requires_grad and torch.is_grad_enabled() and \
            not any(p.requires_grad for p in head.parameters()):
        logp = HeadLogProbs.apply(picked, tgt, head, cap, size)
    else:
        parts, right = [], []
        for i in range(0, int(tgt.numel()), size):
            logits = _logits(head, cap, picked[i:i + size])
            parts.append(-F.cross_entropy(logits, tgt[i:i + size], reduction="none"))
            if hits is not None:
                right.append(logits.detach().argmax(-1) == tgt[i:i + size])
        logp = torch.cat(parts) if parts else picked.float().sum(-1) * 0.0
        if hits is not None:
            chosen = rows % 2 == 0
            hits += [int(chosen.sum()), int((torch.cat(right)[chosen]).sum()) if right else 0]
    return torch.zeros(targets.shape[0], dtype=torch.float32, device=logp.device).index_add(0, rows, logp)


@dataclass
class PairTotals:
    """Sums over preference pairs: `loss_sum` (nats), the chosen and rejected rewards, the pairs whose
    chosen reward is higher (`correct`) and `pairs`. `metrics()` gives the means by TRL's names."""

    loss_sum: float = 0.0
    chosen: float = 0.0
    rejected: float = 0.0
    correct: float = 0.0
    pairs: int = 0
    chosen_tokens: int = 0
    chosen_hits: int = 0

    def add(self, losses: torch.Tensor, chosen: torch.Tensor, rejected: torch.Tensor) -> None:
        """Add one batch's per-pair losses and rewards ([pairs] tensors each)."""
        self.loss_sum += float(losses.detach().sum())
        self.chosen += float(chosen.detach().sum())
        self.rejected += float(rejected.detach().sum())
        self.correct += float((chosen > rejected).sum()) + 0.5 * float((chosen == rejected).sum())
        self.pairs += int(losses.numel())

    @property
    def mean_loss(self) -> float:
        """Mean DPO loss per pair (nats; log 2 = 0.693 when policy and reference agree); 0.0 with no pair."""
        return self.loss_sum / max(self.pairs, 1)

    def metrics(self, prefix: str = "") -> dict[str, float]:
        """`rewards/chosen`, `rewards/rejected`, `rewards/margins`, `rewards/accuracies` (means over the
        pairs; the rewards in nats times beta), each name with `prefix` in front."""
        n = max(self.pairs, 1)
        values = (self.chosen / n, self.rejected / n, (self.chosen - self.rejected) / n, self.correct / n)
        return {prefix + k: v for k, v in zip(REWARD_KEYS, values, strict=True)}

    @property
    def chosen_token_accuracy(self) -> float:
        """Share of the preferred answers' tokens whose argmax prediction is the label (evaluation only;
        0.0 when not counted)."""
        return self.chosen_hits / max(self.chosen_tokens, 1)


def dpo_losses(policy: torch.Tensor, reference: torch.Tensor, beta: float
               ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The sigmoid DPO loss of each pair and its implicit rewards. `policy`, `reference`: [2P] summed
    answer log-probabilities (nats) in the pair layout (chosen at even rows, rejected at odd rows). Returns
    (losses [P], chosen rewards [P], rejected rewards [P]); the rewards are detached, beta x the log-ratio.

    Raises:
        ValueError: an odd number of rows or shapes that differ.
    """
    if policy.shape != reference.shape or policy.dim() != 1 or policy.shape[0] % 2:
        raise ValueError(f"expected two [2P] tensors in the pair layout, got {tuple(policy.shape)} and "
                         f"{tuple(reference.shape)}")
    ratio = policy - reference.to(policy.dtype)
    logits = beta * (ratio[0::2] - ratio[1::2])
    return -F.logsigmoid(logits), beta * ratio[0::2].detach(), beta * ratio[1::2].detach()


class AdapterOffReference:
    """The reference of a run from a fresh adapter: the same model with the LoRA adapter disabled (PEFT
    `disable_adapter`), which is the base model. Calling it gives `answer_logps` [rows] without autograd,
    with dropout off."""

    def context(self, model: nn.Module) -> contextlib.AbstractContextManager:
        """The context in which `model` computes the reference."""
        return model.disable_adapter()  # type: ignore[operator]

    def matches(self, model: nn.Module) -> bool:
        """True when `model` as it stands computes exactly the reference: its adapter is the identity (a
        fresh adapter, every LoRA B zero), as at a fresh run's step 0."""
        return adapter_is_identity(model)

    @torch.no_grad()
    def __call__(self, model: nn.Module, batch: dict[str, torch.Tensor], chunk_bytes: int = 0) -> torch.Tensor:
        was_training = model.training
        model.eval()
        try:
            with self.context(model), autocast_for(model):
                return answer_logps(model, batch, chunk_bytes=chunk_bytes)
        finally:
            model.train(was_training)


@dataclass
class FrozenAdapterReference(AdapterOffReference):
    """The reference of a run that continues an adapter: its starting LoRA weights, frozen. `weights`
    holds a copy of each trainable LoRA parameter's starting value (`params` order); the context swaps
    them in for the reference forward and back afterwards (copies of the LoRA weights only: SmolLM2 at
    rank 16, 4.9 M parameters)."""

    params: list[nn.Parameter]
    weights: list[torch.Tensor] = field(default_factory=list)

    @classmethod
    def snapshot(cls, params: list[nn.Parameter]) -> FrozenAdapterReference:
        """The reference holding `params`' current values."""
        return cls(params, [p.detach().clone() for p in params])

    def matches(self, model: nn.Module) -> bool:
        """True when the LoRA weights are still exactly the frozen starting ones, as at a continued run's
        step 0."""
        return all(torch.equal(p, w) for p, w in zip(self.params, self.weights, strict=True))

    @contextlib.contextmanager
    def context(self, model: nn.Module) -> Iterator[None]:
        current = [p.detach().clone() for p in self.params]
        with torch.no_grad():
            for p, w in zip(self.params, self.weights, strict=True):
                p.copy_(w)
        try:
            yield
        finally:
            with torch.no_grad():
                for p, w in zip(self.params, current, strict=True):
                    p.copy_(w)


@dataclass
class DPOObjective:
    """The DPO loss as `lcsb_core.training.step.run_step` takes an objective: `count(batch)` is the number of pairs
    (the window's loss is a mean over pairs), `loss_sum(model, batch, chunk_bytes)` the summed DPO loss of
    the batch's pairs (0-dim, differentiable), computing the reference first without autograd; `totals`
    accumulates the step's rewards (reset by `reset`). `chunk_bytes`: the LM head's chunk (bytes of fp32
    logits) for the reference and `evaluate`, so no [tokens, vocabulary] logits are alive at once there
    either (0: all positions at once)."""

    beta: float
    reference: AdapterOffReference
    chunk_bytes: int = 0  # the LM head's chunk for the reference and evaluation (TrainConfig.loss_chunk_mib)
    totals: PairTotals = field(default_factory=PairTotals)

    def reset(self) -> None:
        """Start a new step's totals."""
        self.totals = PairTotals()

    @staticmethod
    def count(batch: dict[str, torch.Tensor]) -> int:
        """Pairs in a batch ([2P] rows)."""
        return int(batch["input_ids"].shape[0]) // 2

    def loss_sum(self, model: nn.Module, batch: dict[str, torch.Tensor], chunk_bytes: int) -> torch.Tensor:
        """Summed DPO loss of the batch's pairs (nats, 0-dim fp32); the rewards go into `totals`."""
        ref = self.reference(model, batch, chunk_bytes)
        with autocast_for(model):
            policy = answer_logps(model, batch, chunk_bytes=chunk_bytes)
        losses, chosen, rejected = dpo_losses(policy, ref, self.beta)
        self.totals.add(losses, chosen, rejected)
        return losses.sum()

    @torch.no_grad()
    def evaluate(self, model: nn.Module, batches, on_batch=None) -> PairTotals:
        """DPO loss, rewards and the preferred answers' token accuracy over `batches` of pairs, dropout
        off, without autograd; the model is back in train mode afterwards. `on_batch(n)` after the n-th
        batch. Where the policy equals its reference (`reference.matches`: a run's step 0, a fresh adapter
        or a continued run's starting one), the reference's forward is not run and its log-probabilities
        are the policy's: loss log 2 and rewards 0, as the two forwards give, at half the forwards."""
        policy_is_reference = self.reference.matches(model)
        totals = PairTotals()
        model.eval()
        try:
            for n, batch in enumerate(batches, start=1):
                hits: list[int] = []
                with autocast_for(model):
                    policy = answer_logps(model, batch, chunk_bytes=self.chunk_bytes, hits=hits)
                ref = policy if policy_is_reference else self.reference(model, batch, self.chunk_bytes)
                totals.add(*dpo_losses(policy, ref, self.beta))
                totals.chosen_tokens, totals.chosen_hits = totals.chosen_tokens + hits[0], totals.chosen_hits + hits[1]
                if on_batch is not None:
                    on_batch(n)
        finally:
            model.train()
        return totals


def reference_for(init_adapter: str | None, model: nn.Module, params: list[nn.Parameter]) -> AdapterOffReference:
    """The reference of a DPO run: the adapter switched off for a run from a fresh adapter; for a run that
    continues `init_adapter` (a PEFT adapter folder), that adapter's weights frozen, read from the folder
    (so a resumed run gets the same reference), the model's own weights left as they were.

    Raises:
        ConfigError: `init_adapter` does not fit the model (`lcsb_core.training.init_adapter.load_adapter_weights`).
    """
    if not init_adapter:
        return AdapterOffReference()
    from lcsb_core.training.init_adapter import load_adapter_weights

    current = [p.detach().clone() for p in params]
    load_adapter_weights(Path(init_adapter), model)
    reference = FrozenAdapterReference.snapshot(params)
    with torch.no_grad():
        for p, w in zip(params, current, strict=True):
            p.copy_(w)
    return reference
