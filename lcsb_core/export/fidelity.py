"""How much of a LoRA's effect an exported GGUF keeps, measured in llama.cpp (llama-cpp-python) against
the PEFT model it came from. Needs torch, transformers, peft and llama_cpp (scripts/setup.sh builds it);
the export itself does not (its weight-space `effect_kept` is in the manifest).

    prompts = [tokenizer(text, add_special_tokens=False)["input_ids"], ...]
    result = measure(model_dir, adapter_dir, prompts, new_tokens=32,
                     variants={"adapter": (base_gguf, adapter_gguf), "merged-f16": (merged, None)},
                     base_gguf=base_gguf)
    result["adapter"].top1, result["adapter"].effect_kept

For each prompt the PEFT model (the imported base in fp32 plus the adapter) continues greedily for
`new_tokens` tokens (or to its end-of-sequence token); every llama.cpp variant then reads the same
prompt + continuation (teacher forcing), and on each continuation position:
- `top1`: share of positions where llama.cpp's most likely next token is the PEFT model's token;
- `effect_kept`: <d_gguf, d_peft> / <d_peft, d_peft>, where d is the adapter's change of the
  log-probabilities (PEFT: adapter on minus off; GGUF: the variant minus the shipped base GGUF alone),
  over all positions and the vocabulary: the share of the change kept along its direction (1 all, 0 none);
- `rel_error`: ||d_gguf - d_peft|| / ||d_peft|| (Frobenius norms; 0 keeps the change exactly).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np


@dataclass
class Fidelity:
    """Agreement of one GGUF variant with the PEFT model over `positions` continuation positions."""

    positions: int = 0
    agree: int = 0
    err2: float = 0.0
    change2: float = 0.0
    dot: float = 0.0

    @property
    def top1(self) -> float:
        return self.agree / self.positions if self.positions else float("nan")

    @property
    def effect_kept(self) -> float:
        return self.dot / self.change2 if self.change2 else float("nan")

    @property
    def rel_error(self) -> float:
        return math.sqrt(self.err2 / self.change2) if self.change2 else float("nan")

    def to_dict(self) -> dict:
        return {"positions": self.positions, "top1": round(self.top1, 4), "effect_kept": round(self.effect_kept, 4),
                "rel_error": round(self.rel_error, 4)}


def _log_softmax(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    x = x - x.max(axis=-1, keepdims=True)
    return x - np.log(np.exp(x).sum(axis=-1, keepdims=True))


def open_llama(gguf_path: Path, lora_path: Path | None, *, n_ctx: int, n_threads: int = 2):
    """A llama-cpp-python `Llama` over `gguf_path` (+ the GGUF LoRA `lora_path`) that keeps every
    position's logits (`logits_all`)."""
    from llama_cpp import Llama

    return Llama(model_path=str(gguf_path), lora_path=None if lora_path is None else str(lora_path),
                 n_ctx=n_ctx, n_batch=n_ctx, n_threads=n_threads, n_threads_batch=n_threads,
                 logits_all=True, verbose=False, seed=0)


def llama_logits(llm, tokens: list[int], start: int) -> np.ndarray:
    """Log-probabilities llama.cpp gives after each of `tokens[start - 1:-1]`, (len - start, vocab)."""
    llm.reset()
    llm.eval(tokens)
    return _log_softmax(np.array(llm.scores[start - 1:len(tokens) - 1], dtype=np.float32))


def measure(model_dir: Path, adapter_dir: Path, prompts: list[list[int]], *, new_tokens: int,
            variants: dict[str, tuple[Path, Path | None]], base_gguf: Path, n_threads: int = 2) -> dict[str, Fidelity]:
    """`Fidelity` of each variant (label -> (GGUF, GGUF LoRA or None)) against the PEFT model
    (`model_dir` + `adapter_dir`) on greedy continuations of `prompts` (token ids, as training fed them)."""
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32, local_files_only=True)
    model = PeftModel.from_pretrained(base, str(adapter_dir)).eval()
    n_ctx = max(len(p) for p in prompts) + new_tokens + 8
    llms = {label: open_llama(g, lora, n_ctx=n_ctx, n_threads=n_threads) for label, (g, lora) in variants.items()}
    llama_base = open_llama(base_gguf, None, n_ctx=n_ctx, n_threads=n_threads)
    out = {label: Fidelity() for label in variants}
    for prompt in prompts:
        ids = torch.tensor([prompt])
        with torch.no_grad():
            seq = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=new_tokens,
                                 do_sample=False)[0].tolist()
            n = len(seq) - len(prompt)
            full = torch.tensor([seq])
            peft_lp = _log_softmax(model(input_ids=full).logits[0, len(prompt) - 1:len(seq) - 1].float().numpy())
            with model.disable_adapter():
                base_lp = _log_softmax(model(input_ids=full).logits[0, len(prompt) - 1:len(seq) - 1].float().numpy())
        d_peft = peft_lp - base_lp
        gguf_base_lp = llama_logits(llama_base, seq, len(prompt))
        cont = np.array(seq[len(prompt):])
        for label, llm in llms.items():
            lp = llama_logits(llm, seq, len(prompt))
            d_gguf = lp - gguf_base_lp
            f = out[label]
            f.positions += n
            f.agree += int((lp.argmax(axis=-1) == cont).sum())
            f.err2 += float(np.square(d_gguf - d_peft).sum())
            f.change2 += float(np.square(d_peft).sum())
            f.dot += float((d_gguf * d_peft).sum())
    return out
