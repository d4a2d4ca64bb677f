"""Generation with a base model and LoRA adapters (transformers `generate` + PEFT), for serving.

    engine = InferenceEngine(Path("~/.cache/lcsb/models/SmolLM2-135M-Instruct"), precision="fp32")
    adapter = AdapterRef.of(adapter_dir)                    # hashed once, then passed with each request
    ids = engine.chat_prompt([{"role": "user", "content": "Hi"}], template=engine.template_of(adapter_dir))
    run = engine.stream(ids, adapter, SamplingParams(max_new_tokens=64, temperature=0))
    for text in run: print(text, end="")         # pieces of text as tokens are made
    run.finish_reason, run.completion_tokens     # "stop" | "length", tokens generated

The base loads once (`precision` fp32 by default: on CPU, fp32 with the LoRA applied unmerged was
the fastest of fp32 / bf16 / NF4 here, BENCHMARKS.md "Serving"; bf16 is an option for CUDA). Adapters
are cached by the SHA-256 of their weights in an LRU bounded in count and MiB (`AdapterCache`): a
second request for a model does not reload it, and all adapters share the one base through PEFT's
named adapters (`load_adapter` / `set_adapter` / `delete_adapter`); the base alone runs under
`disable_adapter()`.

Every answer uses the adapter's own chat template (`chat_template.jinja` beside the adapter, else the
base tokenizer's: a job trains with its base's template) and stops at any of the model's end tokens:
the generation config's and tokenizer's EOS plus the chat end markers the vocabulary has
(`<end_of_turn>` for Gemma, `<|im_end|>`, `<|eot_id|>`). Stop strings are cut from the text (OpenAI's
rule: the stop sequence is not returned); text is held back while it could still be the start of one.
`should_stop` is asked before every new token: a cancelled request ends within one token.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch

from lcsb_core.inference.adapters import ADAPTER_WEIGHTS, MIB, AdapterRef
from lcsb_core.inference.lru import LruBound
from lcsb_core.inference.prompts import Prompting, cut_stops, end_tokens, finish_reason
from lcsb_core.inference.sampling import SamplingParams


class AdapterCache:
    """The PEFT adapters loaded on one base, least recently used first out: at most `max_count`
    adapters and `max_mib` MiB of adapter weights (an adapter larger than `max_mib` alone is still
    served, then evicted by the next one)."""

    def __init__(self, base: torch.nn.Module, *, max_count: int, max_mib: float) -> None:
        self.base = base
        self.model: Any = None                    # the PeftModel, made with the first adapter
        self.lru = LruBound(max_count=max_count, max_mib=max_mib)   # adapter name -> MiB
        self.loads = 0                            # adapters read from disk (a cache miss each)

    def activate(self, adapter: AdapterRef) -> Any:
        """The PeftModel with `adapter` active (loaded now if not cached; keyed by its `sha256`)."""
        adapter_dir, name = adapter.path, "a" + adapter.sha256[:16]
        if not self.lru.touch(name):
            from peft import PeftModel

            if self.model is None:
                self.model = PeftModel.from_pretrained(self.base, str(adapter_dir), adapter_name=name,
                                                       is_trainable=False)
            else:
                self.model.load_adapter(str(adapter_dir), adapter_name=name, is_trainable=False)
            self.loads += 1
            for oldest in self.lru.add(name, (adapter_dir / ADAPTER_WEIGHTS).stat().st_size / MIB):
                self.model.set_adapter(name)
                self.model.delete_adapter(oldest)
        self.model.set_adapter(name)
        self.model.eval()
        return self.model

    @property
    def mib(self) -> float:
        """MiB of adapter weights cached now."""
        return self.lru.mib


class _Streamer:
    """transformers' streamer protocol (`put` / `end`): decodes the new tokens incrementally and counts them."""

    def __init__(self, tokenizer: Any, on_text: Callable[[str], None]) -> None:
        self.tokenizer, self.on_text = tokenizer, on_text
        self.tokens: list[int] = []
        self.prompt_seen, self.printed = False, 0

    def put(self, value: torch.Tensor) -> None:
        if not self.prompt_seen:   # generate() puts the prompt first
            self.prompt_seen = True
            return
        self.tokens.extend(int(t) for t in value.reshape(-1).tolist())
        text = self.tokenizer.decode(self.tokens, skip_special_tokens=True)
        # a partial UTF-8 character decodes to U+FFFD: wait for the rest of it
        if not text.endswith("\ufffd") and len(text) > self.printed:
            self.on_text(text[self.printed:])
            self.printed = len(text)

    def end(self) -> None:
        pass


class Generation:
    """One generation: iterate for text pieces; then `finish_reason` ("stop", "length", or
    "cancelled" when `should_stop` ended it) and `completion_tokens`."""

    def __init__(self, engine: InferenceEngine, model: Any, prompt_ids: list[int], params: SamplingParams,
                 should_stop: Callable[[], bool]) -> None:
        self.engine, self.model, self.prompt_ids, self.params = engine, model, prompt_ids, params
        self.should_stop = should_stop
        self.finish_reason: str | None = None
        self.completion_tokens = 0

    def __iter__(self) -> Iterator[str]:
        import queue

        from transformers import StoppingCriteria, StoppingCriteriaList

        pieces: queue.Queue[str | None] = queue.Queue()
        halt = threading.Event()
        streamer = _Streamer(self.engine.tokenizer, pieces.put)
        failure: list[BaseException] = []

        class Halt(StoppingCriteria):
            def __call__(self_, input_ids: torch.Tensor, scores: torch.Tensor, **kwargs: Any) -> torch.Tensor:
                stop = halt.is_set() or self.should_stop()
                if stop:
                    halt.set()
                return torch.full((input_ids.shape[0],), stop, dtype=torch.bool, device=input_ids.device)

        def run() -> None:
            try:
                with torch.inference_mode():
                    self.engine.generate(self.model, self.prompt_ids, self.params, streamer,
                                         StoppingCriteriaList([Halt()]))
            except BaseException as exc:  # noqa: BLE001 - re-raised in the consumer's thread below
                failure.append(exc)
            finally:
                pieces.put(None)

        thread = threading.Thread(target=run, name="lcsb-generate", daemon=True)
        thread.start()
        hit: list[bool] = []

        def made() -> Iterator[str]:
            while (piece := pieces.get()) is not None:
                yield piece

        def stopped() -> None:
            hit.append(True)
            halt.set()

        try:
            yield from cut_stops(made(), self.params.stop, stopped)
        finally:
            halt.set()
            thread.join()
        if failure:
            raise failure[0]
        self.completion_tokens = len(streamer.tokens)
        self.finish_reason = finish_reason(bool(hit), streamer.tokens, self.engine.end_token_ids,
                                           self.params.max_new_tokens)


class InferenceEngine(Prompting):
    """One base model (loaded once, `precision` fp32 or bf16, on `device`) and its adapter cache."""

    def __init__(self, base_path: Path, *, precision: str = "fp32", device: str = "cpu",
                 max_adapters: int = 8, max_adapter_mib: float = 512.0) -> None:
        from lcsb_core.models.loading import load_base_model, load_tokenizer

        self.base_path = base_path
        self.tokenizer = load_tokenizer(base_path)
        base: Any = load_base_model(base_path, quantization=precision, device=torch.device(device))
        base.eval()
        base.config.use_cache = True
        self.base = base
        self.device = torch.device(device)
        self.adapters = AdapterCache(self.base, max_count=max_adapters, max_mib=max_adapter_mib)
        self.end_token_ids = end_tokens(self.tokenizer, getattr(self.base.generation_config, "eos_token_id", None))

    @property
    def context_length(self) -> int:
        """The longest sequence the model takes (tokens)."""
        return int(getattr(self.base.config, "max_position_embeddings", 2048))

    def stream(self, prompt_ids: list[int], adapter: AdapterRef | None, params: SamplingParams,
               should_stop: Callable[[], bool] = lambda: False) -> Generation:
        """A generation of `prompt_ids` with `adapter` (None: the base alone)."""
        model = self.adapters.activate(adapter) if adapter is not None else None
        return Generation(self, model, prompt_ids, params, should_stop)

    def generate(self, model: Any, prompt_ids: list[int], params: SamplingParams, streamer: Any,
                 stopping: Any) -> torch.Tensor:
        """transformers `generate` for one prompt (the engine's generation config, OpenAI's sampling)."""
        from transformers import GenerationConfig

        sample = params.temperature > 0
        config = GenerationConfig(max_new_tokens=params.max_new_tokens, do_sample=sample,
                                  temperature=params.temperature if sample else None,
                                  top_p=params.top_p if sample else None, top_k=0 if sample else None,
                                  eos_token_id=sorted(self.end_token_ids),
                                  pad_token_id=self.tokenizer.pad_token_id, use_cache=True)
        if params.seed is not None:
            torch.manual_seed(params.seed)
        ids = torch.tensor([prompt_ids], dtype=torch.long, device=self.device)
        kwargs = dict(input_ids=ids, attention_mask=torch.ones_like(ids), generation_config=config,
                      streamer=streamer, stopping_criteria=stopping)
        if model is not None:
            return model.generate(**kwargs)
        if self.adapters.model is None:
            return self.base.generate(**kwargs)
        with self.adapters.model.disable_adapter():   # PEFT injected its layers into the base: switch them off
            return self.adapters.model.generate(**kwargs)
