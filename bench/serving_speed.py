"""Serving speed: decode tokens/s per stream and time to first token (TTFT) for a 100-token prompt,
SmolLM2-135M-Instruct with a LoRA adapter (rank 16 on all seven projections, random weights: the
speed does not depend on what it learned), in the engine the inference worker runs
(`lcsb_core.inference`, fp32 base, adapter unmerged), and through the whole service on the embedded
default (uvicorn API + `python -m worker --kind inference`, SQLite, filesystem broker, file token
streams; the official `openai` client streaming chat completions of the base model).

    .venv/bin/python bench/serving_speed.py --threads 2 --tokens 128 --rounds 3 --out bench/results/serving_speed.json
    .venv/bin/python bench/serving_speed.py --threads 1 --tokens 16 --rounds 1 --parts engine    # smoke
    .venv/bin/python bench/serving_speed.py --parts llama-cpp     # llama.cpp on the base GGUF, if installed
    .venv/bin/python bench/serving_speed.py --parts compare --tokens 32 --rounds 5   # interleaved side by side
    python bench/serving_speed.py --parts engines --tokens 64 --rounds 3 --out bench/results/serving_engines.json
        # llama.cpp base vs our llama.cpp engine with a real job's adapter vs transformers + PEFT, SmolLM2
        # and Gemma-3-270M, plus greedy fidelity against PEFT (bench/serving_engines.py)

TTFT "cold" is the first request for the adapter (read from disk and attached to the loaded base);
"cached" the later ones. Decode tokens/s = (tokens - 1) / (time of the last piece - time of the first).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common.results import write_result
from lcsb_core.inference import AdapterRef, InferenceEngine, SamplingParams
from lcsb_core.models.gguf_import import ensure_default_model

PROMPT = ("Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May. "
          "How many clips did Natalia sell altogether in April and May? Think step by step and explain. ") * 4


def make_adapter(base: Path, out: Path) -> Path:
    from peft import LoraConfig, get_peft_model

    from lcsb_core.models.loading import load_base_model
    from lcsb_core.training.config import LORA_TARGETS_ALL

    torch.manual_seed(0)
    model = get_peft_model(load_base_model(base, quantization="fp32", device=torch.device("cpu")),
                           LoraConfig(r=16, lora_alpha=32, target_modules=list(LORA_TARGETS_ALL),
                                      init_lora_weights=False))
    model.save_pretrained(str(out), save_embedding_layers=False)
    return out


def prompt_ids(engine: InferenceEngine, n: int = 100) -> list[int]:
    return engine.text_prompt(PROMPT)[:n]


def timed_stream(pieces) -> tuple[float, float, int]:
    """(seconds to the first piece, seconds from the first to the last piece, pieces) of an iterator."""
    t0, first, last, n = time.perf_counter(), None, None, 0
    for _ in pieces:
        now = time.perf_counter()
        first = first or now
        last, n = now, n + 1
    assert first is not None and last is not None
    return first - t0, last - first, n


def engine_numbers(base: Path, adapter: Path, tokens: int, rounds: int) -> dict:
    engine = InferenceEngine(base)
    ids = prompt_ids(engine)
    params = SamplingParams(max_new_tokens=tokens, temperature=0)
    out: dict = {"prompt_tokens": len(ids)}
    for name, ad in (("adapter", AdapterRef.of(adapter)), ("base", None)):
        ttfts, rates = [], []
        for i in range(rounds + 1):
            run = engine.stream(ids, ad, params)
            t_first, t_rest, _ = timed_stream(run)
            if i == 0 and name == "adapter":
                out["ttft_adapter_cold_s"] = t_first
                continue
            ttfts.append(t_first)
            rates.append((run.completion_tokens - 1) / t_rest if t_rest > 0 else float("nan"))
        out[f"ttft_{name}_cached_s"] = statistics.median(ttfts)
        out[f"decode_{name}_tokens_per_s"] = statistics.median(rates)
    return out


def service_numbers(base: Path, tokens: int, rounds: int, threads: int) -> dict:
    """TTFT and the client's decode rate through the embedded default (base model)."""
    from openai import OpenAI

    from bench.common.service import migrated_with_key
    from lcsb_service.devserver import settings_env, start_api
    from lcsb_service.settings import Settings

    tmp = Path(tempfile.mkdtemp(prefix="lcsb-serving-bench-"))
    settings = Settings(data_dir=tmp / "var", model_dirs=[base.parent], worker_torch_threads=threads,
                        inference_max_new_tokens=max(tokens, 16))
    key = migrated_with_key(settings)
    import os

    env = {**os.environ, **settings_env(settings)}
    log = open(tmp / "inference.log", "wb")
    worker = subprocess.Popen([sys.executable, "-m", "worker", "--kind", "inference"], env=env, stdout=log,
                              stderr=subprocess.STDOUT)
    api, url = start_api(settings, LCSB_ENQUEUER="worker.enqueue:CeleryEnqueuer")
    try:
        oa = OpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0, timeout=600)
        msgs: list[Any] = [{"role": "user", "content": PROMPT[:300]}]
        ttfts, rates = [], []
        for i in range(rounds + 1):
            t0, first, last, done = time.perf_counter(), 0.0, 0.0, 0
            for chunk in oa.chat.completions.create(model=base.name, messages=msgs, temperature=0, max_tokens=tokens,
                                                    stream=True, stream_options={"include_usage": True}):
                if chunk.choices and chunk.choices[0].delta.content:
                    last = time.perf_counter()
                    first = first or last
                if chunk.usage:
                    done, prompt = chunk.usage.completion_tokens, chunk.usage.prompt_tokens
            if i == 0:
                continue   # the worker loads the base on its first request
            ttfts.append(first - t0)
            rates.append((done - 1) / (last - first) if last > first else float("nan"))
        return {"service_ttft_base_s": statistics.median(ttfts), "service_prompt_tokens": prompt,
                "service_decode_tokens_per_s": statistics.median(rates)}
    finally:
        api.terminate()
        worker.terminate()
        worker.wait(30)
        log.close()


def llama_cpp_numbers(tokens: int, rounds: int, threads: int) -> dict:
    """llama.cpp (`llama-cpp-python`, when installed) on the catalog's base GGUF (Q4_1, no adapter): the
    same 100-token prompt, greedy, `threads` threads; its own prompt cache off, so each round prefills."""
    from llama_cpp import Llama

    from lcsb_core.models.gguf_import import shipped_gguf_path

    llm = Llama(model_path=str(shipped_gguf_path()), n_threads=threads, n_ctx=1024, verbose=False)
    ids = llm.tokenize(PROMPT.encode())[:100]
    ttfts, rates = [], []
    for i in range(rounds + 1):
        llm.reset()
        t0, first, last, n = time.perf_counter(), 0.0, 0.0, 0
        for _ in llm.generate(ids, temp=0.0, top_k=1, reset=True):
            last = time.perf_counter()
            first = first or last
            n += 1
            if n >= tokens:
                break
        if i:
            ttfts.append(first - t0)
            rates.append((n - 1) / (last - first))
    return {"llama_cpp_ttft_base_s": statistics.median(ttfts),
            "llama_cpp_decode_tokens_per_s": statistics.median(rates)}


def compare_numbers(adapter: Path, tokens: int, rounds: int, threads: int) -> dict:
    """Decode tokens/s of the fp32 base alone, with the LoRA unmerged (what the worker serves), with the
    LoRA merged into a copy, and of llama.cpp on the base GGUF: interleaved round by round, so a shared
    machine's load falls on all alike. Medians over `rounds`."""
    import copy

    from peft import PeftModel

    from lcsb_core.inference import Generation

    base_path = ensure_default_model()
    engine = InferenceEngine(base_path)
    ids = prompt_ids(engine)
    params = SamplingParams(max_new_tokens=tokens, temperature=0)
    merged = PeftModel.from_pretrained(copy.deepcopy(engine.base), str(adapter)).merge_and_unload().eval()
    runs: dict[str, Any] = {"base": lambda: engine.stream(ids, None, params),
                            "lora_unmerged": lambda: engine.stream(ids, AdapterRef.of(adapter), params),
                            "lora_merged": lambda: Generation(engine, merged, ids, params, lambda: False)}
    try:
        from llama_cpp import Llama

        from lcsb_core.models.gguf_import import shipped_gguf_path

        llm = Llama(model_path=str(shipped_gguf_path()), n_threads=threads, n_ctx=1024, verbose=False)
        gguf_ids = llm.tokenize(PROMPT.encode())[:100]

        def llama() -> Any:
            llm.reset()
            for n, tok in enumerate(llm.generate(gguf_ids, temp=0.0, top_k=1, reset=True), 1):
                yield tok
                if n >= tokens:
                    return
        runs["llama_cpp_q4_1_base"] = llama
    except ImportError:
        pass
    rates: dict[str, list[float]] = {k: [] for k in runs}
    for i in range(rounds + 1):
        for name, make in runs.items():
            _, rest, n = timed_stream(make())
            if i:
                rates[name].append((n - 1) / rest)
    return {f"compare_{k}_tokens_per_s": statistics.median(v) for k, v in rates.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--parts", default="engine,service",
                    help="of engine, service, compare, llama-cpp, engines (comma-separated)")
    ap.add_argument("--models", default="smollm2,gemma", help="engines: of smollm2, gemma")
    ap.add_argument("--steps", type=int, default=20, help="engines: training steps of each model's job")
    ap.add_argument("--prompts", type=int, default=20, help="engines: held-out prompts for fidelity")
    ap.add_argument("--new-tokens", type=int, default=64, help="engines: greedy tokens per fidelity prompt")
    ap.add_argument("--out", type=Path, default=Path("bench/results/scratch/serving_speed.json"))
    args = ap.parse_args()
    started = datetime.now(UTC)
    torch.set_num_threads(args.threads)
    base = ensure_default_model()
    parts, result = set(args.parts.split(",")), {}
    if "engine" in parts:
        with tempfile.TemporaryDirectory() as tmp:
            result.update(engine_numbers(base, make_adapter(base, Path(tmp) / "adapter"), args.tokens, args.rounds))
    if "service" in parts:
        result.update(service_numbers(base, args.tokens, args.rounds, args.threads))
    if "compare" in parts:
        with tempfile.TemporaryDirectory() as tmp:
            result.update(compare_numbers(make_adapter(base, Path(tmp) / "adapter"), args.tokens, args.rounds,
                                          args.threads))
    if "llama-cpp" in parts:
        result.update(llama_cpp_numbers(args.tokens, args.rounds, args.threads))
    if "engines" in parts:
        from bench.serving_engines import engines_numbers

        result.update(engines_numbers(args.models.split(","), tokens=args.tokens, rounds=args.rounds,
                                      threads=args.threads, steps=args.steps, prompts=args.prompts,
                                      new_tokens=args.new_tokens))
    for k, v in result.items():
        print(f"{k}: {v:.3f}" if isinstance(v, float) else f"{k}: {v}")
    write_result(args.out, result, vars(args) | {"out": str(args.out)}, started=started)


if __name__ == "__main__":
    main()
