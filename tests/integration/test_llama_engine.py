"""The llama.cpp serving engine (`lcsb_core.inference.llama_engine`, llama-cpp-python 0.3.36) with a real SmolLM2
adapter from a short real chat job trained here: its answers are llama.cpp's own with the converted
adapter (`Llama(lora_path=...)`) and differ from the base; a fixed seed reproduces; every end token and
stop string stops; cancel stops within a token; the adapter LRU stays bounded in count and MiB while an
evicted adapter answers as before, and converted GGUFs are reused from disk."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from lcsb_core.inference import AdapterRef, SamplingParams, adapter_hash, end_tokens
from lcsb_core.inference.llama_engine import LlamaEngine
from lcsb_core.models.gguf_import import ensure_default_model, shipped_gguf_path
from lcsb_core.training.config import TrainConfig
from tests.integration.test_export_llama_cpp import gsm8k

pytestmark = pytest.mark.integration
QUESTIONS = ["What is 7 plus 5?", "Name three colours of the rainbow.", "How many legs does a spider have?"]


@pytest.fixture(scope="module")
def job(tmp_path_factory) -> Path:
    """The adapter folder of a short real SmolLM2 chat job (GSM8K, 4 steps at a high learning rate, so its
    answers visibly differ from the base)."""
    from lcsb_core.data import gsm8k_to_chat
    from lcsb_core.training.trainer import Trainer

    tmp = tmp_path_factory.mktemp("job")
    (tmp / "train.jsonl").write_text("".join(json.dumps(gsm8k_to_chat(r)) + "\n" for r in gsm8k("train", 0, 16)))
    cfg = TrainConfig.from_dict({
        "data": {"train_file": str(tmp / "train.jsonl"), "max_seq_len": 128},
        "model": {"name_or_path": "SmolLM2-135M-Instruct", "quantization": "fp32", "device": "cpu"},
        "lora": {"rank": 8, "alpha": 16}, "lcsb": {"schedule": "full"},
        "optim": {"learning_rate": 1e-2, "warmup_steps": 1, "lr_schedule": "constant"},
        "batch_size": 4, "max_steps": 4, "eval_every": 0, "seed": 0, "output_dir": str(tmp / "run"),
    })
    Trainer(cfg).train()
    return tmp / "run" / "adapter"


@pytest.fixture(scope="module")
def engine(tmp_path_factory) -> LlamaEngine:
    return LlamaEngine(ensure_default_model(), shipped_gguf_path(), lora_dir=tmp_path_factory.mktemp("lora"),
                       threads=2)


def variant(adapter: Path, out: Path, scale: float) -> Path:
    """A copy of `adapter` with every lora_B scaled by `scale` (another adapter of the same shapes)."""
    from safetensors.numpy import load_file, save_file

    shutil.copytree(adapter, out)
    weights = load_file(str(adapter / "adapter_model.safetensors"))
    save_file({k: (v * scale).astype(v.dtype) if "lora_B" in k else v for k, v in weights.items()},
              str(out / "adapter_model.safetensors"))
    return out


def greedy(engine: LlamaEngine, adapter: Path | None, question: str, n: int = 24) -> list[int]:
    ids = engine.chat_prompt([{"role": "user", "content": question}], engine.template_of(adapter))
    ref = AdapterRef.of(adapter) if adapter else None
    run = engine.stream(ids, ref, SamplingParams(max_new_tokens=n, temperature=0))
    "".join(run)
    assert run.finish_reason in ("stop", "length") and run.completion_tokens == len(run.tokens)
    return run.tokens


def test_adapter_answers_are_llama_cpps_own_and_differ_from_the_base(engine, job):
    from llama_cpp import Llama

    mine = {q: greedy(engine, job, q) for q in QUESTIONS}
    base = {q: greedy(engine, None, q) for q in QUESTIONS}
    assert any(mine[q] != base[q] for q in QUESTIONS)
    assert engine.adapters.conversions == 1
    gguf = engine.adapters.lora_dir / f"{adapter_hash(job)}.gguf"
    reference = Llama(model_path=str(engine.gguf_path), lora_path=str(gguf), n_ctx=512, n_threads=2, verbose=False)
    for q in QUESTIONS:
        ids = engine.chat_prompt([{"role": "user", "content": q}], engine.template_of(job))
        theirs = []
        for tok in reference.generate(ids, temp=0.0, top_k=1, reset=True):
            theirs.append(tok)
            if tok in engine.end_token_ids or len(theirs) == len(mine[q]):
                break
        assert mine[q] == theirs, q
    # switching back and forth reuses no KV cache of the other adapter
    assert greedy(engine, job, QUESTIONS[0]) == mine[QUESTIONS[0]]
    assert greedy(engine, None, QUESTIONS[0]) == base[QUESTIONS[0]]


def test_seed_reproduces_a_sampled_answer(engine, job):
    ids = engine.chat_prompt([{"role": "user", "content": "Tell me a story."}], engine.template_of(job))
    ref = AdapterRef.of(job)

    def sample(seed: int) -> str:
        return "".join(engine.stream(ids, ref, SamplingParams(max_new_tokens=24, temperature=1.0, top_p=0.95,
                                                              seed=seed)))

    assert sample(1) == sample(1) != sample(2)


def test_end_tokens_and_stop_strings_stop(engine, job):
    ids = engine.chat_prompt([{"role": "user", "content": "What is 2 plus 2?"}], engine.template_of(job))
    run = engine.stream(ids, None, SamplingParams(max_new_tokens=200, temperature=0))
    full = "".join(run)
    assert run.finish_reason == "stop" and run.tokens[-1] == engine.tokenizer.convert_tokens_to_ids("<|im_end|>")
    assert "<|im_end|>" not in full and full.strip()
    stop = full[4:8]
    run = engine.stream(ids, None, SamplingParams(max_new_tokens=200, temperature=0, stop=("never", stop)))
    assert "".join(run) == full[:full.index(stop)] and run.finish_reason == "stop"
    run = engine.stream(ids, None, SamplingParams(max_new_tokens=3, temperature=0))
    "".join(run)
    assert run.finish_reason == "length" and run.completion_tokens == 3


def test_gemma_stops_at_end_of_turn_and_eos():
    from lcsb_core.models.gguf_import import ensure_model
    from lcsb_core.models.loading import load_tokenizer

    tokenizer = load_tokenizer(ensure_model("gemma-3-270m"))
    ids = end_tokens(tokenizer, None)
    assert {tokenizer.convert_tokens_to_ids("<end_of_turn>"), tokenizer.eos_token_id} <= ids


def test_cancel_stops_within_a_token(engine, job):
    ids = engine.text_prompt("Once upon a time")
    calls: list[int] = []
    run = engine.stream(ids, AdapterRef.of(job), SamplingParams(max_new_tokens=50, temperature=0),
                        should_stop=lambda: calls.append(1) or len(calls) > 3)
    "".join(run)
    assert run.finish_reason == "cancelled" and run.completion_tokens == 3


def test_the_adapter_cache_stays_bounded_and_evicted_adapters_answer_as_before(engine, job, tmp_path):
    adapters = [job] + [variant(job, tmp_path / f"v{i}", s) for i, s in enumerate((0.5, 2.0))]
    small = LlamaEngine(engine.base_path, engine.gguf_path, lora_dir=tmp_path / "lora", threads=2, max_adapters=2)
    first = {a: greedy(small, a, QUESTIONS[1], 12) for a in adapters}
    assert len({tuple(v) for v in first.values()}) >= 2
    for _ in range(2):
        for a in adapters:
            assert greedy(small, a, QUESTIONS[1], 12) == first[a]
            assert len(small.adapters.lru) <= 2 and len(small.adapters.handles) <= 2
    assert small.adapters.conversions == 3 and small.adapters.loads == 3 + 2 * 3   # every switch missed
    loads = small.adapters.loads
    assert greedy(small, adapters[-1], QUESTIONS[1], 12) == first[adapters[-1]] and small.adapters.loads == loads
    one_mib = next(iter(small.adapters.lru.sizes.values()))
    again = LlamaEngine(engine.base_path, engine.gguf_path, lora_dir=tmp_path / "lora", threads=2,
                        max_adapter_mib=one_mib * 1.5)
    for a in adapters:
        assert greedy(again, a, QUESTIONS[1], 12) == first[a]
        assert len(again.adapters.lru) == 1   # the MiB bound holds one adapter of this size
    assert again.adapters.conversions == 0 and np.isclose(again.adapters.mib, one_mib)   # GGUFs reused from disk


def test_batched_greedy_answers_equal_one_at_a_time(engine, job):
    """The batch decoder (graded evaluation: 20 held-out GSM8K questions in 16 slots, so slots are reused)
    makes, for each sequence, exactly the tokens a one-sequence call (serving) makes; base and adapter."""
    batch = LlamaEngine(engine.base_path, engine.gguf_path, lora_dir=engine.adapters.lora_dir, threads=2,
                        n_ctx=256, slots=16)
    questions = [r["question"] for r in gsm8k("test", 100, 20)]
    params = SamplingParams(max_new_tokens=32, temperature=0)
    for adapter in (None, job):
        prompts = [engine.chat_prompt([{"role": "user", "content": q}], engine.template_of(adapter)) for q in questions]
        together = batch.generate_batch(prompts, AdapterRef.of(adapter) if adapter else None, params)
        alone = [greedy(engine, adapter, q, 32) for q in questions]
        assert together == alone
        assert sum(len(t) for t in together) > 20 * 16   # real answers, not an end token each
    assert batch.decoder.steps > 0


def test_gemma_completions_graded_equal_served():
    """Gemma-3-270M, completions prompts: the graded path (`ServedAnswers`, Gemma's slot count) answers each
    prompt as the serving engine's one-sequence `stream` does, token for token."""
    from lcsb_core.eval.samples import EvalSample
    from lcsb_core.eval.served import ServedAnswers, eval_slots
    from lcsb_core.models.gguf_import import ensure_model, serving_gguf

    base = ensure_model("gemma-3-270m")
    rows = gsm8k("test", 0, 6)
    samples = [EvalSample(i + 1, "", prompt=f"Question: {r['question']}\nAnswer:") for i, r in enumerate(rows)]
    served = ServedAnswers(base, serving_gguf("gemma-3-270m"), Path(__import__("tempfile").mkdtemp()),
                           slots=eval_slots("gemma-3-270m", len(samples)), seq_tokens=256, threads=2)
    texts, counts = served.answers(samples, None, max_new_tokens=24)
    engine = served.engine
    for s, text, count in zip(samples, texts, counts, strict=True):
        run = engine.stream(engine.text_prompt(s.prompt), None, SamplingParams(max_new_tokens=24, temperature=0))
        assert "".join(run) == text and run.completion_tokens == count
    served.close()


LOOPING = "1, 2, 3, 1, 2, 3, 1, 2, 3,"   # a completions prompt SmolLM2 continues greedily with " 1, 2, 3" for ever


def test_frequency_and_presence_penalties_follow_openai_and_zero_changes_nothing(engine):
    """OpenAI's penalties on llama.cpp's sampler. frequency_penalty grows with each repeat: on a completions
    prompt that greedy continues with " 1, 2, 3" for ever (the top token 16 times in 48), 1.5 breaks the loop
    (at most half as many). presence_penalty is a fixed offset once a token was made: 2.0 makes a story
    use more distinct tokens (it cannot break the loop above, whose lead is larger than 2 logits). At 0 the
    answer is exactly the plain greedy one (bit-reproducible)."""
    from collections import Counter

    def answer(ids: list[int], **penalties: float) -> list[int]:
        run = engine.stream(ids, None, SamplingParams(max_new_tokens=48, temperature=0, **penalties))
        "".join(run)
        return run.tokens

    loop = engine.text_prompt(LOOPING)
    plain = answer(loop)
    top = Counter(plain).most_common(1)[0][1]
    assert top >= 12   # the prompt loops without a penalty
    assert answer(loop, frequency_penalty=0.0, presence_penalty=0.0) == plain == answer(loop)
    assert Counter(answer(loop, frequency_penalty=1.5)).most_common(1)[0][1] <= top / 2
    story = engine.chat_prompt([{"role": "user", "content": "Tell me a story about a cat."}], engine.template_of(None))
    plain = answer(story)
    present = answer(story, presence_penalty=2.0)
    assert present != plain and len(set(present)) > len(set(plain))
