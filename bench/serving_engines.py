"""The `engines` part of bench/serving_speed.py (issue 32): per catalog model, a short real job trained
here (bench/export_gguf.py's `train`: GSM8K, LoRA r16 alpha 32 on the seven projections, fp32), then
side by side in one process, interleaved round by round so a shared machine's load falls on all alike:

- `llama_cpp_base`: llama-cpp-python's own `Llama.generate` on the catalog's base GGUF, no adapter;
- `llama_engine`: our engine (`lcsb_core.inference.llama_engine.LlamaEngine`) with the job's adapter;
- `transformers`: the fallback (`lcsb_core.inference.InferenceEngine`, fp32, LoRA unmerged) with it.

Each: decode tokens/s = (tokens - 1) / (time of the last token - time of the first), TTFT for a 100-token
prompt uncached (KV cache dropped first) and cached (the same prompt again; transformers has no prompt
cache). `first_request_ttft_s`: the engine's first request for the adapter (GGUF conversion, load, prefill).
Fidelity: greedy `new_tokens` tokens of our engine against a PEFT reference on the same base weights (the
imported bf16 checkpoint in fp32) for held-out GSM8K prompts: free-running (share of positions where the
two sequences agree, and of prompts identical throughout) and teacher-forced top-1 of the same adapter
GGUF in llama.cpp (`lcsb_core.export.fidelity.measure`).
"""

from __future__ import annotations

import statistics
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

PROMPT = ("Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May. "
          "How many clips did Natalia sell altogether in April and May? Think step by step and explain. ") * 4


def _timed(make: Callable[[], Iterator[Any]]) -> tuple[float, float, int]:
    """(seconds to the first item, seconds from the first to the last, items) of `make()`."""
    t0, first, last, n = time.perf_counter(), 0.0, 0.0, 0
    for _ in make():
        last = time.perf_counter()
        first = first or last
        n += 1
    return first - t0, last - first, n


def _prompts(entry: Any, tokenizer: Any, count: int) -> tuple[list[dict], list[list[int]]]:
    """(training rows, held-out prompt ids) as bench/export_gguf.py builds them."""
    from bench.export_gguf import rows
    from lcsb_core.data import gsm8k_to_chat
    from lcsb_core.models.catalog import SMOLLM2

    if entry is SMOLLM2:
        examples = [gsm8k_to_chat(r) for r in rows("train", 0, 400)]
        texts = [tokenizer.apply_chat_template([{"role": "user", "content": r["question"]}], tokenize=False,
                                               add_generation_prompt=True) for r in rows("test", 0, count)]
        return examples, [tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts]
    examples = [{"prompt": f"Question: {r['question']}\nAnswer:", "completion": " " + r["answer"]}
                for r in rows("train", 0, 400)]
    return examples, [[tokenizer.bos_token_id] + tokenizer(f"Question: {r['question']}\nAnswer:",
                                                           add_special_tokens=False)["input_ids"]
                      for r in rows("test", 0, count)]


def speed(model_dir: Path, gguf: Path, adapter: Path, lora_dir: Path, *, tokens: int, rounds: int,
          threads: int) -> dict:
    """Decode tokens/s and TTFT of the three engines (module doc), medians over `rounds`."""
    import torch
    from llama_cpp import Llama

    from lcsb_core.inference import AdapterRef, InferenceEngine, SamplingParams
    from lcsb_core.inference.llama_engine import LlamaEngine

    torch.set_num_threads(threads)
    ours = LlamaEngine(model_dir, gguf, lora_dir=lora_dir, threads=threads)
    ids = ours.text_prompt(PROMPT)[:100]
    params = SamplingParams(max_new_tokens=tokens, temperature=0)
    ref = AdapterRef.of(adapter)
    t0 = time.perf_counter()
    next(iter(ours.stream(ids, ref, params)))
    out: dict = {"prompt_tokens": len(ids), "first_request_ttft_s": time.perf_counter() - t0}
    raw = Llama(model_path=str(gguf), n_threads=threads, n_threads_batch=threads, n_ctx=1024, verbose=False)
    hf = InferenceEngine(model_dir)

    def raw_run() -> Iterator[int]:
        for n, tok in enumerate(raw.generate(ids, temp=0.0, top_k=1, reset=True), 1):
            yield tok
            if n >= tokens:
                return

    def ours_run() -> Iterator[str]:
        run = ours.stream(ids, ref, params)
        yield from run
        made.append(run.completion_tokens)

    made: list[int] = []
    runs: dict[str, tuple[Callable[[], None], Callable[[], Iterator[Any]]]] = {
        "llama_cpp_base": (raw.reset, raw_run),
        "llama_engine": (lambda: None, ours_run),   # every request prefills its whole prompt
        "transformers": (lambda: None, lambda: iter(hf.stream(ids, ref, params))),
    }
    stats: dict[str, dict[str, list[float]]] = {k: {"rate": [], "uncached": [], "cached": []} for k in runs}
    for i in range(rounds + 1):
        for name, (drop, make) in runs.items():
            drop()
            ttft, rest, n = _timed(make)
            ttft_cached, _, _ = _timed(make) if name != "transformers" else (ttft, 0.0, 0)
            if i:   # round 0 warms up
                s = stats[name]
                s["rate"].append((n - 1) / rest if rest > 0 else float("nan"))
                s["uncached"].append(ttft)
                s["cached"].append(ttft_cached)
    for name, s in stats.items():
        out[f"{name}_decode_tokens_per_s"] = statistics.median(s["rate"])
        out[f"{name}_ttft_uncached_s"] = statistics.median(s["uncached"])
        out[f"{name}_ttft_cached_s"] = statistics.median(s["cached"])
    out["llama_engine_completion_tokens"] = min(made)
    out["ratio_llama_engine_to_llama_cpp_base"] = (out["llama_engine_decode_tokens_per_s"]
                                                   / out["llama_cpp_base_decode_tokens_per_s"])
    return out


def peft_greedy(model_dir: Path, adapter: Path, prompts: list[list[int]], *, new_tokens: int,
                end_ids: Iterable[int]) -> list[list[int]]:
    """The PEFT reference: greedy `new_tokens` tokens per prompt (ids, an end token included) of `adapter`
    on the imported checkpoint in fp32."""
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32, local_files_only=True)
    peft = PeftModel.from_pretrained(base, str(adapter)).eval()
    refs = []
    for prompt in prompts:
        ids = torch.tensor([prompt])
        with torch.no_grad():
            out = peft.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=new_tokens,
                                do_sample=False, eos_token_id=sorted(end_ids))
        refs.append(out[0, len(prompt):].tolist())
    return refs


def agreement(refs: list[list[int]], runs: list[list[int]]) -> tuple[float, int]:
    """(share of the reference's token positions where the run has the same token, runs identical to their
    reference throughout), free-running: a position after a divergence counts only if it agrees anyway."""
    positions = sum(len(ref) for ref in refs)
    agree = sum(a == b for ref, run in zip(refs, runs, strict=True) for a, b in zip(ref, run, strict=False))
    return agree / positions, sum(ref == run for ref, run in zip(refs, runs, strict=True))


def fidelity(model_dir: Path, gguf: Path, adapter: Path, lora_dir: Path, prompts: list[list[int]], *,
             new_tokens: int, threads: int) -> dict:
    """Our engine's greedy tokens against the PEFT reference (fp32), free-running and teacher-forced."""
    import torch

    from lcsb_core.export.fidelity import measure
    from lcsb_core.inference import AdapterRef, SamplingParams
    from lcsb_core.inference.llama_engine import LlamaEngine

    torch.set_num_threads(threads)
    ours = LlamaEngine(model_dir, gguf, lora_dir=lora_dir, threads=threads)
    refs = peft_greedy(model_dir, adapter, prompts, new_tokens=new_tokens, end_ids=ours.end_token_ids)

    def greedy(prompt: list[int], ref: AdapterRef | None) -> list[int]:
        run = ours.stream(prompt, ref, SamplingParams(max_new_tokens=new_tokens, temperature=0))
        "".join(run)
        return run.tokens

    ref = AdapterRef.of(adapter)
    mine = [greedy(prompt, ref) for prompt in prompts]
    differs_from_base = sum(greedy(prompt, None) != tokens for prompt, tokens in zip(prompts, mine, strict=True))
    share, identical = agreement(refs, mine)
    forced = measure(model_dir, adapter, prompts, new_tokens=new_tokens, base_gguf=gguf, n_threads=threads,
                     variants={"adapter": (gguf, lora_dir / f"{ref.sha256}.gguf")})["adapter"]
    return {"prompts": len(prompts), "new_tokens": new_tokens, "free_running_position_agreement": share,
            "identical_answers": identical, "answers_differing_from_base": differs_from_base,
            "teacher_forced": forced.to_dict()}


def engines_numbers(models: list[str], *, tokens: int, rounds: int, threads: int, steps: int, prompts: int,
                    new_tokens: int) -> dict:
    """Per model (`smollm2`, `gemma`): the job, then `speed` and `fidelity` (module doc)."""
    from bench.export_gguf import train
    from lcsb_core.models.catalog import GEMMA3_270M, SMOLLM2
    from lcsb_core.models.gguf_import import ensure_model, shipped_gguf_path
    from lcsb_core.models.loading import load_tokenizer

    result: dict = {}
    with tempfile.TemporaryDirectory(prefix="serving-engines-") as tmp:
        for key in models:
            entry = SMOLLM2 if key == "smollm2" else GEMMA3_270M
            model_dir = ensure_model(entry.name)
            examples, held_out = _prompts(entry, load_tokenizer(model_dir), prompts)
            t0 = time.perf_counter()
            run = train(Path(tmp) / key, entry.name, examples, steps)
            gguf = shipped_gguf_path(entry, assemble_dir=Path(tmp) / key)
            part: dict[str, Any] = {"train_s": time.perf_counter() - t0, "steps": steps}
            part |= speed(model_dir, gguf, run / "adapter", Path(tmp) / key / "lora-speed", tokens=tokens,
                          rounds=rounds, threads=threads)
            print(key, part, flush=True)
            part["fidelity"] = fidelity(model_dir, gguf, run / "adapter", Path(tmp) / key / "lora",
                                        held_out, new_tokens=new_tokens, threads=threads)
            print(key, part["fidelity"], flush=True)
            result[entry.name] = part
    return {"engines": result}
