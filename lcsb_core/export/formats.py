"""Export formats and what each cannot hold, decided from the adapter's `adapter_config.json` alone.

Pure Python (no numpy, no torch): the service checks a request with it before anything is queued.

    ADAPTER      adapter.gguf        llama.cpp's LoRA adapter (f16) for the shipped base GGUF
    MERGED_F16   merged-f16.gguf     the base GGUF with the adapted tensors merged, stored as F16
    MERGED_Q8_0  merged-q8_0.gguf    the same, adapted tensors as Q8_0
    MERGED_Q4_1  merged-q4_1.gguf    the same, adapted tensors as Q4_1; only on request (a short job's
                                     LoRA delta is mostly below a 4-bit step: see the manifest's fidelity)

    problems = refusals(json.load(open("adapter_config.json")), ["adapter", "merged-f16"],
                        tied_embeddings=True)     # [] when every format can hold the adapter
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from lcsb_core.errors import ExportError

ADAPTER = "adapter"
MERGED_F16 = "merged-f16"
MERGED_Q8_0 = "merged-q8_0"
MERGED_Q4_1 = "merged-q4_1"
FORMATS = (ADAPTER, MERGED_F16, MERGED_Q8_0, MERGED_Q4_1)
DEFAULT_FORMATS = (ADAPTER, MERGED_F16, MERGED_Q8_0)
MERGED_FORMATS = (MERGED_F16, MERGED_Q8_0, MERGED_Q4_1)
FILE_NAMES = {ADAPTER: "adapter.gguf", MERGED_F16: "merged-f16.gguf", MERGED_Q8_0: "merged-q8_0.gguf",
              MERGED_Q4_1: "merged-q4_1.gguf"}
"""The file each format writes in an export folder."""

EMBEDDING_MODULES = ("embed_tokens", "lm_head")


def parse_formats(formats: Iterable[str] | None) -> tuple[str, ...]:
    """The requested formats in canonical order, defaulting to `DEFAULT_FORMATS`.

    Raises:
        ExportError: an unknown format (named in the message), or an empty list.
    """
    if formats is None:
        return DEFAULT_FORMATS
    asked = list(formats)
    unknown = [f for f in asked if f not in FORMATS]
    if unknown:
        raise ExportError(f"unknown export format {unknown[0]!r}; formats: {', '.join(FORMATS)}")
    if not asked:
        raise ExportError(f"must name at least one format of {', '.join(FORMATS)}")
    return tuple(f for f in FORMATS if f in asked)


def _targets(config: dict) -> list[str]:
    targets = config.get("target_modules") or []
    return [targets] if isinstance(targets, str) else list(targets)


def refusals(config: dict, formats: Sequence[str], *, tied_embeddings: bool) -> list[str]:
    """What the requested `formats` cannot hold of the PEFT adapter described by `config` (the parsed
    `adapter_config.json`), one sentence each; [] when the export can run.

    Refused for every format: non-LoRA adapters, DoRA (a magnitude vector per output row that neither
    llama.cpp's adapter nor a plain merge into the shipped tensors keeps), per-module alpha patterns,
    `modules_to_save` (full weights, not a LoRA), trained biases, `fan_in_fan_out` layouts,
    `lora_alpha` <= 0, and LoRA on `lm_head` or `embed_tokens` of a model whose embeddings are tied (one
    GGUF tensor serves both, so neither the adapter nor a merge can change one without the other; PEFT
    changes only one). Refused for `adapter` only: rsLoRA with a `rank_pattern` (llama.cpp applies one
    alpha over each tensor's rank, so alpha/sqrt(r) cannot be stated once for mixed ranks).
    """
    out: list[str] = []
    if str(config.get("peft_type", "LORA")).upper() != "LORA":
        out.append(f"only LoRA adapters export; this is a {config.get('peft_type')} adapter")
    if config.get("use_dora"):
        out.append("DoRA adapters do not export: GGUF LoRA adapters have no magnitude vector, "
                   "and the merged files would need DoRA's per-row norm, which this export does not compute")
    if config.get("alpha_pattern"):
        out.append("per-module alpha patterns (alpha_pattern) do not export: a GGUF LoRA adapter holds one "
                   "adapter.lora.alpha for all tensors")
    if config.get("modules_to_save"):
        out.append(f"modules_to_save ({', '.join(config['modules_to_save'])}) are full weights, not LoRA; "
                   "they do not export")
    if config.get("bias", "none") != "none":
        out.append(f"LoRA bias {config.get('bias')!r} does not export: the base GGUF has no bias tensors to "
                   "add them to")
    if config.get("fan_in_fan_out"):
        out.append("fan_in_fan_out (Conv1D) layouts do not export; the supported bases use nn.Linear")
    alpha = config.get("lora_alpha")
    if not isinstance(alpha, int | float) or alpha <= 0:
        out.append(f"lora_alpha must be > 0 to export (llama.cpp reads alpha 0 as 'no scaling'), got {alpha!r}")
    if tied_embeddings:
        tied = [t for t in _targets(config) if t.rsplit(".", 1)[-1] in EMBEDDING_MODULES]
        if tied:
            out.append(f"LoRA on {', '.join(tied)} does not export: this base model ties its input "
                       "embeddings and output head to one GGUF tensor, so neither a GGUF adapter nor a "
                       "merged file can change one without the other")
    if ADAPTER in formats and config.get("use_rslora") and config.get("rank_pattern"):
        out.append("rsLoRA with a rank_pattern does not export as adapter.gguf: llama.cpp scales every "
                   "tensor by one alpha over its rank (use a merged format)")
    return out


def check_exportable(config: dict, formats: Sequence[str], *, tied_embeddings: bool) -> None:
    """Raise ExportError naming every problem `refusals` finds (none: return)."""
    problems = refusals(config, formats, tied_embeddings=tied_embeddings)
    if problems:
        raise ExportError("; ".join(problems))
