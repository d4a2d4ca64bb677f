"""One request on an inference worker: payload -> model (resolved again, with tenancy) -> tokens on
the request's stream (`lcsb_service.streams`).

    serve(ctx, request_id)

Per process: one engine per base model, made on the first request for it (the base loads once; its
adapter LRU is bounded by `Settings.inference_adapter_cache_count` and `inference_adapter_cache_mib`):
`lcsb_core.inference.llama_engine.LlamaEngine` (llama.cpp on the catalog's GGUF, adapters converted to GGUF once
into `<data_dir>/inference-adapters/gguf/`) on CPU, else `lcsb_core.inference.InferenceEngine`
(`Settings.inference_engine`). Adapter archives are extracted once into
`<data_dir>/inference-adapters/<hash of the storage key>/`.

Records written: `start` (prompt tokens) or an `error` first (404 `model_not_found`, 400
`context_length_exceeded` naming the field, 400 `model_has_no_chat_template` for chat with a model that
has none: `ServedModel.chat_refusal`, before any model loads, then the engine's template; 400
`unsupported_parameter` for log probabilities on the transformers engine), then `delta`s of the
request's `n` choices, then `end` (`stop` / `length` per choice) or an `error` (500
`generation_failed`): `worker.inference.choices`. A cancelled request (the client went away) stops
within a token and leaves nothing behind.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import threading
import time
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from lcsb_core.eval.served import SERVING_INVARIANT_SLOTS
from lcsb_core.inference.adapters import AdapterRef, adapter_hash
from lcsb_core.inference.llama_engine import MAX_CONTEXT
from lcsb_service.artifacts import fetch_adapter
from lcsb_service.catalog import ModelInfo
from lcsb_service.chat import GenerationRequest
from lcsb_service.errors import NotFound
from lcsb_service.served_models import NO_CHAT_TEMPLATE, ServedModel, resolve
from lcsb_service.settings import Settings
from lcsb_service.streams import TokenStreams, token_streams
from worker.context import WorkerContext
from worker.inference.choices import answer, unsupported
from worker.threads import thread_policy

log = logging.getLogger(__name__)
_engines: dict[str, Any] = {}
_serial_locks: dict[int, threading.Lock] = {}
_lock = threading.Lock()

SHA_FILE = "sha256"   # beside `ready` in an unpacked adapter's folder: the adapter's `adapter_hash`


def engine_for(ctx: WorkerContext, base: ModelInfo) -> Any:
    """The process's engine for `base` (loaded now on first use): `lcsb_core.inference.llama_engine.LlamaEngine` on
    the catalog's base GGUF when `inference_engine` allows it (auto: on CPU, with llama-cpp-python
    installed and the GGUF's package present), else `lcsb_core.inference.InferenceEngine`."""
    with _lock:
        if base.name not in _engines:
            s = ctx.settings
            # the training rule's thread count (the override, else this worker's CPUs: affinity and cgroup quota)
            threads = thread_policy(override=s.worker_torch_threads).threads
            t0 = time.monotonic()
            gguf = _base_gguf(s, base)
            if gguf is not None:
                from lcsb_core.inference.llama_engine import LlamaEngine

                n_ctx = min(MAX_CONTEXT, base.context_length)
                slots = sequence_slots(s, kv_mib_per_token(base.path) * n_ctx, gguf.stat().st_size / 2**20,
                                       SERVING_INVARIANT_SLOTS.get(base.name))
                _engines[base.name] = LlamaEngine(base.path, gguf, threads=threads,
                                                  lora_dir=s.data_dir.resolve() / "inference-adapters" / "gguf",
                                                  max_adapters=s.inference_adapter_cache_count,
                                                  max_adapter_mib=s.inference_adapter_cache_mib,
                                                  n_ctx=n_ctx, slots=slots)
                log.info("loaded base %s (llama.cpp, %s, %d threads, %d sequences of %d tokens) in %.1f s",
                         base.name, gguf.name, threads, slots, n_ctx, time.monotonic() - t0)
            else:
                import torch

                from lcsb_core.inference import InferenceEngine

                # its wait policy would have to be set before torch loads OpenMP, so decoding keeps libgomp's
                torch.set_num_threads(threads)
                _engines[base.name] = InferenceEngine(base.path, precision=s.inference_precision,
                                                      device=s.inference_device,
                                                      max_adapters=s.inference_adapter_cache_count,
                                                      max_adapter_mib=s.inference_adapter_cache_mib)
                log.info("loaded base %s (transformers, %s, %s) in %.1f s", base.name, s.inference_precision,
                         s.inference_device, time.monotonic() - t0)
        return _engines[base.name]


def kv_mib_per_token(base_path: Path) -> float:
    """MiB of llama.cpp's f16 KV cache per token of one sequence of the model at `base_path`: keys and
    values of every layer, 2 x layers x KV heads x head size x 2 bytes (from its `config.json`; Gemma's
    sliding-window layers are counted whole, an upper bound)."""
    import json

    config = json.loads((base_path / "config.json").read_text())
    config = config.get("text_config", config)
    heads = int(config["num_attention_heads"])
    head_dim = int(config.get("head_dim") or int(config["hidden_size"]) // heads)
    return 2 * int(config["num_hidden_layers"]) * int(config.get("num_key_value_heads", heads)) * head_dim * 2 / 2**20


def sequence_slots(s: Settings, kv_mib_per_sequence: float, model_mib: float, invariant: int | None = None) -> int:
    """Sequences one llama.cpp engine decodes together: `inference_max_sequences`, fewer where their KV
    cache would take more than half of what the memory cap leaves beside the model and the adapter
    cache (the other half: a second base, compute buffers, the tokenizer), and at most `invariant`, the
    model's bound for answers that do not depend on their batch (`eval.served.SERVING_INVARIANT_SLOTS`:
    Gemma-3-270M 7); at least 1. A reduction is logged with the reason.

    SmolLM2-135M at 8,192 tokens: 180 MiB per sequence; the defaults (4,096 MiB cap, 512 MiB of
    adapters) leave room for 9, so 4 (the default) run."""
    budget = (s.inference_memory_mib - s.inference_adapter_cache_mib - model_mib) / 2
    fits = max(1, int(budget // kv_mib_per_sequence))
    if fits < s.inference_max_sequences:
        log.warning("%d sequences fit the KV budget (%.0f MiB, %.0f MiB each) of LCSB_INFERENCE_MEMORY_MIB %d, "
                    "not LCSB_INFERENCE_MAX_SEQUENCES %d", fits, budget, kv_mib_per_sequence,
                    s.inference_memory_mib, s.inference_max_sequences)
    if invariant is not None and invariant < min(fits, s.inference_max_sequences):
        log.warning("at most %d sequences decode together on this model (more would change its answers), not "
                    "LCSB_INFERENCE_MAX_SEQUENCES %d", invariant, s.inference_max_sequences)
        fits = invariant
    return min(s.inference_max_sequences, fits)


def _base_gguf(s: Settings, base: ModelInfo) -> Path | None:
    """The catalog GGUF to serve `base` with in llama.cpp, or None for the transformers engine.

    Raises:
        ModelLoadError: `inference_engine` is "llama_cpp" and the GGUF or llama-cpp-python is missing.
    """
    from lcsb_core.errors import ModelLoadError
    from lcsb_core.models.gguf_import import serving_gguf

    if s.inference_engine == "transformers" or (s.inference_engine == "auto" and s.inference_device != "cpu"):
        return None
    try:
        return serving_gguf(base.name)
    except ModelLoadError as exc:
        if s.inference_engine == "llama_cpp":
            raise
        log.warning("serving %s with transformers + PEFT: %s", base.name, exc)
        return None


def adapter_folder(ctx: WorkerContext, key: str) -> AdapterRef:
    """The extracted adapter of the archive stored under `key`, extracted and hashed once per machine: into a
    temporary folder renamed into place (atomic; when another worker was first, its copy is used), with the
    adapter's SHA-256 (`adapter_hash`, the engines' cache key) written beside it, so no request re-reads
    and re-hashes the weights. A folder unpacked before the digest was stored gets it on first use."""
    root = ctx.settings.data_dir.resolve() / "inference-adapters" / hashlib.sha256(key.encode()).hexdigest()[:32]
    if not (root / "ready").is_file():
        tmp = root.with_name(f"{root.name}.tmp-{os.getpid()}")
        shutil.rmtree(tmp, ignore_errors=True)
        folder = fetch_adapter(ctx.storage, key, tmp)
        (tmp / SHA_FILE).write_text(adapter_hash(folder))
        (tmp / "ready").write_text(folder.name)
        try:
            tmp.rename(root)
        except OSError:   # another worker renamed its copy first
            shutil.rmtree(tmp, ignore_errors=True)
    folder = root / (root / "ready").read_text()
    if not (root / SHA_FILE).is_file():
        (root / SHA_FILE).write_text(adapter_hash(folder))
    return AdapterRef(folder, (root / SHA_FILE).read_text())


def _error(status: int, code: str, message: str, param: str | None = None) -> dict[str, Any]:
    return {"t": "error", "status": status, "code": code, "param": param, "message": message}


def serve(ctx: WorkerContext, rid: str) -> None:
    """Answer request `rid` (see the module docstring); never raises for a request's own failure."""
    streams = token_streams(ctx.settings)
    raw = streams.get_request(rid)
    if raw is None or streams.cancelled(rid):
        log.info("request %s expired or was cancelled before it started", rid)
        streams.discard(rid)
        return
    try:
        req = GenerationRequest.model_validate_json(raw)
    except ValidationError as exc:
        log.warning("request %s: invalid payload: %s", rid, exc)
        streams.append(rid, _error(400, "invalid_request", "invalid generation request"))
        return
    try:
        with ctx.db.read_session() as session:
            target = resolve(session, req.owner_id, req.model, ctx.settings.resolved_model_dirs)
    except NotFound as exc:
        streams.append(rid, _error(404, "model_not_found", exc.message, "model"))
        return
    try:
        _generate(ctx, streams, req, target)
    except Exception:
        log.exception("request %s on %s failed", rid, req.model)
        streams.append(rid, _error(500, "generation_failed", "the model failed while generating this answer"))


def _generate(ctx: WorkerContext, streams: TokenStreams, req: GenerationRequest, target: ServedModel) -> None:
    t0 = time.monotonic()
    refusal = target.chat_refusal() if req.messages is not None else None
    if refusal is not None:  # the API refuses these first; the payload is checked again here
        streams.append(req.id, _error(400, NO_CHAT_TEMPLATE, refusal, "model"))
        return
    engine = engine_for(ctx, target.base)
    if (refused := unsupported(req, engine)) is not None:
        streams.append(req.id, refused)
        return
    adapter = adapter_folder(ctx, target.adapter_key) if target.adapter_key else None
    if req.messages is not None:
        template = engine.template_of(adapter.path if adapter else None)
        if not template:
            streams.append(req.id, _error(400, NO_CHAT_TEMPLATE,
                                          f"{req.model} has no chat template; use /v1/completions", "model"))
            return
        ids, field = engine.chat_prompt([m.model_dump() for m in req.messages], template), "messages"
    else:
        ids, field = engine.text_prompt(req.prompt or ""), "prompt"
    context = engine.context_length
    if req.clamp_to_context and len(ids) < context:
        req = req.model_copy(update={"max_new_tokens": min(req.max_new_tokens, context - len(ids))})
    if len(ids) + req.max_new_tokens > context:
        param = field if len(ids) >= context else req.max_tokens_param
        streams.append(req.id, _error(400, "context_length_exceeded",
                                      f"{param}: the prompt ({len(ids)} tokens) plus {req.max_tokens_param} "
                                      f"({req.max_new_tokens}) exceed {req.model}'s context of {context} tokens",
                                      param))
        return
    with _serial(engine):
        answer(streams, req, engine, ids, adapter, t0)


def _serial(engine: Any) -> Any:
    """A lock that makes this worker's requests on `engine` take turns, for an engine that decodes one
    request at a time (transformers); a no-op for llama.cpp's, whose batcher decodes them together."""
    from contextlib import nullcontext

    from lcsb_core.inference.llama_engine import LlamaEngine

    if isinstance(engine, LlamaEngine):
        return nullcontext()
    with _lock:
        return _serial_locks.setdefault(id(engine), threading.Lock())
