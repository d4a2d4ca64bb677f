"""Serving and batched generation: the inference room.

Its face is torch-free, so the API and the service import it without loading torch: the sampling
parameters (`SamplingParams`, `choice_params`), prompts and stops (`Prompting`, `end_tokens`,
`cut_stops`, `finish_reason`), an adapter's identity (`AdapterRef`, `adapter_hash`) and the `Engine` protocol both
engines follow. The engines and their adapter caches import torch or llama.cpp and load on first use
of their names (PEP 562 `__getattr__`):

- `LlamaEngine` (`llama_engine`): the CPU default, llama.cpp through llama-cpp-python on the catalog's
  GGUF, adapters converted once to GGUF (`GGUFAdapterCache`); decodes with `llama_batch.BatchDecoder`,
  serves through `llama_serving.ContinuousBatcher`, read back by `llama_generation.LlamaGeneration`
  (log probabilities of each sampled token: `logprobs`).
- `InferenceEngine` (`transformers_engine`): transformers `generate` + PEFT named adapters
  (`AdapterCache`), the fallback where llama.cpp cannot serve.

Both caches keep their bounds with `lru.LruBound`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from lcsb_core.inference.adapters import ADAPTER_WEIGHTS, MIB, AdapterRef, adapter_hash
from lcsb_core.inference.engine import Engine
from lcsb_core.inference.prompts import CHAT_END_TOKENS, Prompting, cut_stops, end_tokens, finish_reason
from lcsb_core.inference.sampling import SEED_SPACE, SamplingParams, choice_params

if TYPE_CHECKING:
    from lcsb_core.inference.llama_engine import GGUFAdapterCache, LlamaEngine
    from lcsb_core.inference.transformers_engine import AdapterCache, Generation, InferenceEngine

_LAZY = {"LlamaEngine": "llama_engine", "GGUFAdapterCache": "llama_engine",
         "InferenceEngine": "transformers_engine", "AdapterCache": "transformers_engine",
         "Generation": "transformers_engine"}

__all__ = ["ADAPTER_WEIGHTS", "CHAT_END_TOKENS", "MIB", "SEED_SPACE", "AdapterCache", "AdapterRef",
           "Engine", "GGUFAdapterCache", "Generation", "InferenceEngine", "LlamaEngine", "Prompting", "SamplingParams",
           "adapter_hash", "choice_params", "cut_stops", "end_tokens", "finish_reason"]


def __getattr__(name: str) -> Any:
    """The engines, imported when first named (they load torch or llama.cpp).

    Raises:
        AttributeError: `name` is not one of the room's public names.
    """
    if name in _LAZY:
        return getattr(importlib.import_module(f"lcsb_core.inference.{_LAZY[name]}"), name)
    raise AttributeError(f"module 'lcsb_core.inference' has no attribute {name!r}")
