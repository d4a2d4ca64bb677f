"""Graded answers from the serving engine: the base GGUF in llama.cpp with the checkpoint's adapter
converted as the inference worker converts it, the prompts rendered and decoded as the inference
worker does (`lcsb_core.inference.llama_engine.LlamaEngine`), every prompt of one evaluation decoded together.

    served = ServedAnswers(base_dir, gguf, run_dir / "eval_engine", slots=16, seq_tokens=640, threads=2)
    texts, counts = served.answers(samples, adapter_dir, max_new_tokens=128)   # adapter_dir None: the base

So a graded answer is, token for token, what `/v1/chat/completions` (chat samples) or `/v1/completions`
(prompt/completion samples) answers for that prompt with `temperature: 0`, the same token limit and
penalties, on a CPU inference worker (tests/integration/test_served_equals_graded.py). The engine loads
on the first evaluation (the GGUF is memory-mapped: 98 MiB for SmolLM2-135M, 240 MiB for Gemma-3-270M;
its KV cache is slots x seq_tokens f16 cells).
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from lcsb_core.eval.samples import EvalSample
from lcsb_core.inference.adapters import AdapterRef
from lcsb_core.inference.sampling import SamplingParams

# Sequences decoded together, per catalog model (BENCHMARKS.md, "Graded evaluation on the serving engine").
# SmolLM2's greedy tokens are equal batched and alone (checked on 32 GSM8K prompts x 64 tokens, and by
# tests/serving/test_served_equals_graded.py). Gemma-3-270M's are not from 8 sequences up: its first
# decode step's logits differ by up to 0.84 beside 7 others (none up to 7; cause inside llama.cpp not found;
# with flash attention the first step agrees and later ones still drift), so a Gemma evaluation decodes its
# prompts one at a time on the same decoder: equal to serving, without the batch's speed.
EVAL_SLOTS = {"SmolLM2-135M-Instruct": 16}
# The most sequences a serving engine may decode together and still answer each as alone, per catalog
# model where that is bounded (Gemma: equal up to 7, above); a model not named here is not bounded.
SERVING_INVARIANT_SLOTS = {"gemma-3-270m": 7}


def eval_slots(model_name: str, n_samples: int) -> int:
    """Sequences one graded evaluation of `model_name` (a catalog name) decodes together: `EVAL_SLOTS`,
    else 1, at most `n_samples`."""
    return max(1, min(EVAL_SLOTS.get(model_name, 1), n_samples))


class ServedAnswers:
    """The serving engine for one run's graded evaluations: base folder `base_dir` (tokenizer, chat
    template, end tokens), base GGUF `gguf`, scratch folder `work_dir` (converted adapters), `slots`
    sequences of at most `seq_tokens` tokens (prompt + answer), `threads` CPU threads.

    Raises (on the first `answers`):
        ModelLoadError: llama.cpp cannot load the GGUF or a converted adapter.
    """

    engine_name = "llama.cpp"

    def __init__(self, base_dir: Path, gguf: Path, work_dir: Path, *, slots: int, seq_tokens: int,
                 threads: int) -> None:
        self.base_dir, self.gguf, self.work_dir = base_dir, gguf, work_dir
        self.slots, self.seq_tokens, self.threads = slots, seq_tokens, threads
        self._engine: Any = None

    @property
    def engine(self) -> Any:
        """The `LlamaEngine`, loaded on first use."""
        if self._engine is None:
            from lcsb_core.inference.llama_engine import LlamaEngine

            self._engine = LlamaEngine(self.base_dir, self.gguf, lora_dir=self.work_dir / "gguf", threads=self.threads,
                                       n_ctx=self.seq_tokens, slots=self.slots, max_adapters=1)
        return self._engine

    def prompt_ids(self, sample: EvalSample, adapter: AdapterRef | None) -> list[int]:
        """The prompt as the inference worker tokenizes it: a chat sample with the adapter's chat template
        (else the base's) and the generation prompt, a prompt/completion sample as a completions prompt."""
        engine = self.engine
        if sample.messages:
            template = engine.template_of(adapter.path if adapter else None)
            return list(engine.chat_prompt(list(sample.messages), template))
        return list(engine.text_prompt(sample.prompt))

    def answers(self, samples: Sequence[EvalSample], adapter_dir: Path | None, *, max_new_tokens: int,
                frequency_penalty: float = 0.0, presence_penalty: float = 0.0, max_prompt_tokens: int | None = None,
                on_token: Callable[[int, int], None] | None = None) -> tuple[list[str], list[int]]:
        """(answer texts, answer token counts) of `samples`, greedy, with the adapter at `adapter_dir`
        (None: the base model). `max_prompt_tokens`: keep only a prompt's last tokens (the worker would
        refuse a longer prompt; graded evaluation answers it). The converted adapter is deleted after.

        Raises:
            ModelLoadError, lcsb_core.errors.ExportError: as `LlamaEngine.stream`.
        """
        adapter = AdapterRef.of(adapter_dir) if adapter_dir is not None else None   # hashed once for the batch
        engine = self.engine
        room = self.seq_tokens - max_new_tokens
        cap = min(room, max_prompt_tokens) if max_prompt_tokens else room
        prompts = [self.prompt_ids(s, adapter)[-cap:] for s in samples]
        params = SamplingParams(max_new_tokens=max_new_tokens, temperature=0.0,
                                frequency_penalty=frequency_penalty, presence_penalty=presence_penalty)
        try:
            tokens = engine.generate_batch(prompts, adapter, params, on_token)
        finally:
            shutil.rmtree(self.work_dir / "gguf", ignore_errors=True)
        return [engine.answer_text(t) for t in tokens], [len(t) for t in tokens]

    def close(self) -> None:
        """Free the engine (the next `answers` loads it again)."""
        if self._engine is not None:
            self._engine.close()
            self._engine = None
