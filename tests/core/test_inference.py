"""`lcsb_core.inference` on a tiny random Llama with SmolLM2's tokenizer: the adapter LRU stays bounded
in count and MiB over many switches and serves an evicted adapter again exactly; the base alone is
unchanged by loaded adapters; stop strings are cut (also across pieces); cancel stops within a token;
a fixed seed reproduces a sampled answer."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from peft import LoraConfig, get_peft_model

from lcsb_core.inference import AdapterRef, InferenceEngine, SamplingParams
from lcsb_core.inference.prompts import first_stop, stop_prefix_len
from lcsb_core.models.loading import load_base_model
from lcsb_core.models.tiny import TINY, build_tiny_models


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    return build_tiny_models(tmp_path_factory.mktemp("tiny")) / TINY


def make_adapters(base: Path, root: Path, n: int) -> list[Path]:
    out = []
    for i in range(n):
        torch.manual_seed(100 + i)
        model = get_peft_model(load_base_model(base, quantization="fp32", device=torch.device("cpu")),
                               LoraConfig(r=4, lora_alpha=256, target_modules=["q_proj", "v_proj", "down_proj"],
                                          init_lora_weights=False))
        model.save_pretrained(root / f"adapter-{i}", save_embedding_layers=False)
        out.append(root / f"adapter-{i}")
    return out


def greedy(engine: InferenceEngine, adapter: Path | None, n: int = 6) -> list[int]:
    ids = engine.text_prompt("The quick brown fox")
    ref = AdapterRef.of(adapter) if adapter else None
    run = engine.stream(ids, ref, SamplingParams(max_new_tokens=n, temperature=0))
    text = "".join(run)
    assert run.finish_reason in ("stop", "length")
    return engine.tokenizer(text, add_special_tokens=False)["input_ids"]


def test_the_adapter_cache_stays_bounded_and_serves_evicted_adapters_again(tiny, tmp_path):
    adapters = make_adapters(tiny, tmp_path, 4)
    engine = InferenceEngine(tiny, max_adapters=2, max_adapter_mib=1024)
    base = greedy(engine, None)
    first = {a: greedy(engine, a) for a in adapters}
    assert len({tuple(v) for v in first.values()} | {tuple(base)}) >= 3   # the adapters change the answers
    for _ in range(3):
        for a in adapters:
            assert greedy(engine, a) == first[a]
            assert len(engine.adapters.lru) <= 2 and len(engine.adapters.model.peft_config) <= 2
    assert greedy(engine, None) == base   # loaded adapters are off for the base
    loads = engine.adapters.loads
    assert greedy(engine, adapters[-1]) == first[adapters[-1]] and engine.adapters.loads == loads   # cached: no reload
    small = InferenceEngine(tiny, max_adapters=8, max_adapter_mib=engine.adapters.mib / 2 * 1.01)
    for a in adapters:
        greedy(small, a)
        assert len(small.adapters.lru) == 1   # the MiB bound holds one adapter of this size


def test_stop_strings_cancel_and_seed(tiny):
    engine = InferenceEngine(tiny)
    ids = engine.text_prompt("Once upon a time")
    full = "".join(engine.stream(ids, None, SamplingParams(max_new_tokens=12, temperature=0)))
    stop = full[3:6]
    run = engine.stream(ids, None, SamplingParams(max_new_tokens=12, temperature=0, stop=(stop, "never")))
    assert "".join(run) == full[:full.index(stop)] and run.finish_reason == "stop"
    calls = []
    run = engine.stream(ids, None, SamplingParams(max_new_tokens=50, temperature=0),
                        should_stop=lambda: calls.append(1) or len(calls) > 2)
    "".join(run)
    assert run.finish_reason == "cancelled" and run.completion_tokens <= 3
    sampled = [("".join(engine.stream(ids, None, SamplingParams(max_new_tokens=10, temperature=1.0, seed=s))))
               for s in (1, 1, 2)]
    assert sampled[0] == sampled[1] != sampled[2]


def test_stop_helpers():
    assert first_stop("abc STOP x", ("STOP", "x")) == 4 and first_stop("abc", ("z",)) is None
    assert stop_prefix_len("hello ST", ("STOP",)) == 2 and stop_prefix_len("hello", ("STOP",)) == 0
    assert stop_prefix_len("aaS", ("SxT", "aSy")) == 2
