"""Generation with llama.cpp (llama-cpp-python) on the catalog's base GGUF plus LoRA adapters converted
to llama.cpp's LoRA GGUF: the CPU default for serving (`lcsb_core.inference` is the transformers + PEFT
fallback, for CUDA or a base without a GGUF). Same interface as `InferenceEngine`:

    engine = LlamaEngine(model_dir, gguf_path, lora_dir=Path("var/inference-adapters/gguf"), threads=2)
    adapter = AdapterRef.of(adapter_dir)                    # hashed once, then passed with each request
    ids = engine.chat_prompt(messages, template=engine.template_of(adapter_dir))
    run = engine.stream(ids, adapter, SamplingParams(max_new_tokens=64, temperature=0))
    for text in run: print(text, end="")
    run.finish_reason, run.completion_tokens, run.tokens
    run = engine.stream(ids, None, params, n=3, logprobs=5)   # 3 choices, seeds seed + i, log probabilities
    for piece in run.pieces(): piece.index, piece.text, piece.logprobs

The base GGUF loads once; one `llama_batch.BatchDecoder` context holds `slots` sequences of `n_ctx`
tokens each (one for a serving worker; graded evaluation decodes all of an evaluation's prompts in
one engine of many slots: `generate_batch`). Serving and grading run the same decoder, template, end
tokens and samplers, so a greedy served answer equals the graded one token for token. A PEFT adapter is converted on its
first use with the export's converter (`lcsb_core.export.convert.write_adapter_gguf`) into
`<lora_dir>/<adapter SHA-256>.gguf` (kept across restarts), loaded with `llama_adapter_lora_init`, and
kept in an LRU bounded in count and MiB of GGUF (`GGUFAdapterCache`; evicted adapters are freed with
`llama_adapter_lora_free`). Each request sets its adapter on the context (`llama_set_adapters_lora`;
none for the base alone); every request prefills its whole prompt (no prompt cache is kept between
requests: a cached prefix finished by a one-token decode would differ in the last bits of its logits).

Prompts come from the base folder's transformers tokenizer and the job's chat template (`Prompting`,
one source with the fallback); its token ids are the GGUF's (both catalog GGUFs are where the folders
were imported from). Sampling follows OpenAI: temperature 0 greedy, else `top_p` and temperature, no top-k or
min-p; `seed` seeds the draw; `frequency_penalty` / `presence_penalty` as OpenAI defines them
(`llama_batch.sampler_chain`).
Every end token stops (`end_tokens`), stop strings are cut as in the fallback (`cut_stops`), and
`should_stop` is asked before every new token. `n` choices are `n` sequences of the batch (choice i
seeded `seed + i`: `inference.choice_params`); log probabilities are computed from the logits llama.cpp
made for each sampled token (`llama_batch.BatchDecoder.logprobs`), tokens shown as llama.cpp's pieces
(`token_bytes`).
"""

from __future__ import annotations

import ctypes
import os
import queue
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from lcsb_core.errors import ModelLoadError
from lcsb_core.inference.adapters import MIB, AdapterRef
from lcsb_core.inference.llama_batch import BatchDecoder, SeqJob
from lcsb_core.inference.llama_generation import LlamaGeneration
from lcsb_core.inference.llama_serving import ContinuousBatcher, Output
from lcsb_core.inference.prompts import Prompting, end_tokens
from lcsb_core.inference.sampling import SamplingParams, choice_params

__all__ = ["MAX_CONTEXT", "GGUFAdapterCache", "LlamaEngine", "LlamaGeneration"]
from lcsb_core.inference.lru import LruBound

MAX_CONTEXT = 8192   # tokens of KV cache per engine (Gemma-3-270M's 32,768 would hold ~0.6 GB for nothing)


class GGUFAdapterCache:
    """llama.cpp LoRA adapters loaded on one base model, least recently used first out: at most
    `max_count` adapters and `max_mib` MiB of adapter GGUF (one larger than `max_mib` alone is still
    served, then evicted by the next). `convert(adapter_dir, out)` writes an adapter's GGUF file."""

    def __init__(self, model: Any, lora_dir: Path, convert: Callable[[Path, Path], None], *,
                 max_count: int, max_mib: float) -> None:
        self.model, self.lora_dir, self.convert = model, lora_dir, convert
        self.lru = LruBound(max_count=max_count, max_mib=max_mib)   # SHA-256 -> MiB of adapter GGUF
        self.handles: dict[str, Any] = {}                     # SHA-256 -> llama_adapter_lora pointer
        self.loads = 0          # adapters loaded into llama.cpp (a cache miss each)
        self.conversions = 0    # PEFT adapters converted to GGUF (first use on this machine)

    def gguf_of(self, adapter: AdapterRef) -> Path:
        """The adapter's GGUF file, converted now when not on disk (written under a temporary name and
        renamed: concurrent workers never read half a file)."""
        path = self.lora_dir / f"{adapter.sha256}.gguf"
        if not path.is_file():
            self.lora_dir.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f"{path.name}.partial-{os.getpid()}-{threading.get_ident()}")
            self.convert(adapter.path, tmp)
            tmp.rename(path)
            self.conversions += 1
        return path

    def get(self, adapter: AdapterRef, before_evict: Callable[[str], None], *,
            keep: frozenset[str] = frozenset()) -> tuple[str, Any]:
        """(SHA-256, llama_adapter_lora pointer) of `adapter`, loaded now if not cached. `before_evict(sha)`
        runs before an adapter is freed (the context must not hold it then); adapters in `keep` (in use by
        requests) are not evicted.

        Raises:
            ModelLoadError: llama.cpp refused the converted file.
        """
        import llama_cpp

        sha = adapter.sha256
        if self.lru.touch(sha):
            return sha, self.handles[sha]
        path = self.gguf_of(adapter)
        handle = llama_cpp.llama_adapter_lora_init(self.model, str(path).encode())
        if not handle:
            raise ModelLoadError(f"llama.cpp could not load the LoRA adapter converted from {adapter.path.name}")
        self.loads += 1
        self.handles[sha] = handle
        for oldest in self.lru.add(sha, path.stat().st_size / MIB, keep):
            before_evict(oldest)
            llama_cpp.llama_adapter_lora_free(self.handles.pop(oldest))
        return sha, handle

    @property
    def mib(self) -> float:
        """MiB of adapter GGUF loaded now."""
        return self.lru.mib


class LlamaEngine(Prompting):
    """One base GGUF (`gguf_path`, loaded once, `threads` CPU threads) with the tokenizer and generation
    config of the imported model folder `base_path`, its LoRA adapter cache (GGUF files in `lora_dir`),
    and one decoder of `slots` sequences of `n_ctx` tokens each (default: the model's context, at most
    `MAX_CONTEXT`). KV cache: slots x n_ctx cells (SmolLM2: 22.5 KiB per cell in f16).

    Raises:
        ModelLoadError: llama.cpp cannot load `gguf_path`.
    """

    def __init__(self, base_path: Path, gguf_path: Path, *, lora_dir: Path, threads: int = 2,
                 max_adapters: int = 8, max_adapter_mib: float = 512.0, n_ctx: int | None = None,
                 slots: int = 1) -> None:
        import llama_cpp
        from transformers import AutoConfig, GenerationConfig

        from lcsb_core.models.loading import load_tokenizer

        self.base_path, self.gguf_path = base_path, gguf_path
        self.tokenizer = load_tokenizer(base_path)
        config = AutoConfig.from_pretrained(base_path, local_files_only=True)
        try:
            eos = GenerationConfig.from_pretrained(base_path, local_files_only=True).eos_token_id
        except OSError:   # no generation_config.json
            eos = getattr(config, "eos_token_id", None)
        self.end_token_ids = end_tokens(self.tokenizer, eos)
        context = int(getattr(config, "max_position_embeddings", 2048))
        self.n_ctx = min(n_ctx or MAX_CONTEXT, context)
        from llama_cpp._logger import set_verbose

        set_verbose(False)   # llama.cpp's log: errors only (what `Llama(verbose=False)` sets)
        llama_cpp.llama_backend_init()
        params = llama_cpp.llama_model_default_params()
        # No repacked weights: llama.cpp's repacked kernels (Q4_K on AVX2: Gemma's GGUF) compute a token
        # by another kernel when it is one of 4 rows than alone, so an answer would depend on its batch.
        params.use_extra_bufts = False
        self.model = llama_cpp.llama_model_load_from_file(str(gguf_path).encode(), params)
        if not self.model:
            raise ModelLoadError(f"llama.cpp cannot load {gguf_path.name}")
        self.decoder = BatchDecoder(self.model, slots=slots, seq_tokens=self.n_ctx, threads=threads)
        self._base_gguf: Any = None
        self.adapters = GGUFAdapterCache(self.model, lora_dir, self._convert, max_count=max_adapters,
                                         max_mib=max_adapter_mib)
        self.lock = threading.RLock()     # held for every use of the context and the adapter cache
        self._active: str | None = None   # SHA-256 of the adapter set on the context; None: the base alone
        self._batcher: ContinuousBatcher | None = None
        self._vocab = llama_cpp.llama_model_get_vocab(self.model)
        self._pieces: dict[int, bytes] = {}

    @property
    def context_length(self) -> int:
        """The longest sequence this engine takes (tokens): the model's context, at most `MAX_CONTEXT`."""
        return self.n_ctx

    def _convert(self, adapter_dir: Path, out: Path) -> None:
        """PEFT adapter -> llama.cpp LoRA GGUF with the export's converter (checks included)."""
        from lcsb_core.export.adapter import read_adapter
        from lcsb_core.export.base import BaseGGUF
        from lcsb_core.export.convert import plan_tensors, write_adapter_gguf
        from lcsb_core.export.formats import ADAPTER, check_exportable

        if self._base_gguf is None:
            self._base_gguf = BaseGGUF.open(self.gguf_path)   # header parse: seconds, once
        adapter = read_adapter(adapter_dir)
        check_exportable(adapter.config, (ADAPTER,), tied_embeddings=self._base_gguf.tied_embeddings)
        write_adapter_gguf(adapter, self._base_gguf, plan_tensors(adapter, self._base_gguf), out)

    @property
    def batcher(self) -> ContinuousBatcher:
        """The scheduler that decodes `stream`'s requests together (started on first use)."""
        with self.lock:
            if self._batcher is None:
                self._batcher = ContinuousBatcher(self)
            return self._batcher

    @property
    def active_adapter(self) -> str | None:
        """SHA-256 of the adapter set on the context now (None: the base alone)."""
        return self._active

    def use(self, adapter: tuple[str, Any] | None) -> None:
        """Set `adapter` ((SHA-256, pointer); None: none) on the context.

        Raises:
            RuntimeError: llama.cpp refused the adapter.
        """
        import llama_cpp

        key = adapter[0] if adapter is not None else None
        if key == self._active:
            return
        ctx = self.decoder.ctx
        if adapter is None:
            rc = llama_cpp.llama_set_adapters_lora(ctx, None, 0, None)
        else:
            one = (llama_cpp.llama_adapter_lora_p_ctypes * 1)(adapter[1])
            rc = llama_cpp.llama_set_adapters_lora(ctx, one, 1, (ctypes.c_float * 1)(1.0))
        if rc != 0:
            raise RuntimeError(f"llama_set_adapters_lora failed ({rc})")
        self._active = key

    def _detach(self, sha: str) -> None:
        if self._active == sha:
            self.use(None)

    def token_bytes(self, token: int) -> bytes:
        """The bytes token `token` stands for (llama.cpp's piece; a special token as its text, `<|im_end|>`)."""
        import llama_cpp

        if token not in self._pieces:
            buf = ctypes.create_string_buffer(256)
            size = llama_cpp.llama_token_to_piece(self._vocab, token, buf, len(buf), 0, True)
            self._pieces[token] = buf.raw[:max(size, 0)]
        return self._pieces[token]

    def stream(self, prompt_ids: list[int], adapter: AdapterRef | None, params: SamplingParams,
               should_stop: Callable[[], bool] = lambda: False, *, n: int = 1,
               logprobs: int | None = None) -> LlamaGeneration:
        """A generation of `prompt_ids` with `adapter` (None: the base alone): `n`
        choices, decoded as `n` sequences of the batch (choice i with `choice_params(params, i)`), with
        the log probabilities of each token and its `logprobs` most likely alternatives (None: none).

        Raises:
            ValueError: `n` below 1.
            lcsb_core.errors.ExportError: the adapter cannot be held by a GGUF LoRA (it adapts a tensor
                the base GGUF lacks, or is of another base).
            ModelLoadError: llama.cpp refused the converted adapter.
        """
        if adapter is not None:
            self.adapters.gguf_of(adapter)   # converted outside the lock: others keep decoding
        if n < 1:
            raise ValueError(f"n must be at least 1, got {n}")
        lefts = [threading.Event() for _ in range(n)]

        def stops(left: threading.Event) -> Callable[[], bool]:
            return lambda: left.is_set() or should_stop()

        jobs = [SeqJob(prompt_ids, choice_params(params, i), stops(left), logprobs) for i, left in enumerate(lefts)]
        out: Output = queue.SimpleQueue()
        with self.lock:   # loaded and queued at once: no other request can evict it in between
            batcher = self.batcher
            loaded = (self.adapters.get(adapter, self._detach, keep=batcher.in_use())
                      if adapter is not None else None)
            for i, job in enumerate(jobs):
                batcher.submit(loaded, job, out=out, index=i)
        return LlamaGeneration(self, prompt_ids, params, out, lefts)

    def generate_batch(self, prompts: list[list[int]], adapter: AdapterRef | None, params: SamplingParams,
                       on_token: Callable[[int, int], None] | None = None) -> list[list[int]]:
        """Every prompt's answer (token ids, an end token included when one ended it) with the adapter
        `adapter` (None: the base), decoded together in this engine's slots (continuous
        batching); the same decoder and samplers as `stream`, so a greedy answer equals the one
        `stream` gives for that prompt. `on_token(done, total)`: after each token, of
        len(prompts) x max_new_tokens at most.

        Raises:
            ValueError: a prompt plus `params.max_new_tokens` exceeds the engine's `n_ctx`.
            lcsb_core.errors.ExportError, ModelLoadError: as `stream`.
        """
        out: list[list[int]] = [[] for _ in prompts]
        total, done = len(prompts) * params.max_new_tokens, 0
        with self.lock:
            self.use(self.adapters.get(adapter, self._detach) if adapter is not None else None)
            for job, token in self.decoder.run([SeqJob(p, params) for p in prompts], self.end_token_ids):
                out[job].append(token)
                done += 1
                if on_token is not None:
                    on_token(done, total)
        return out

    def answer_text(self, tokens: list[int]) -> str:
        """The answer's text as served: decoded without special tokens (an end token drops out)."""
        return str(self.tokenizer.decode(tokens, skip_special_tokens=True))

    def close(self) -> None:
        """Free the decoder's context, the adapters and the model (the engine is unusable after)."""
        import llama_cpp

        if self._batcher is not None:
            self._batcher.close()
        with self.lock:
            self.decoder.close()
            for handle in self.adapters.handles.values():
                llama_cpp.llama_adapter_lora_free(handle)
            self.adapters.handles.clear()
            if self.model:
                llama_cpp.llama_model_free(self.model)
                self.model = None

