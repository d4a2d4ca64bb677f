"""PEFT LoRA -> GGUF: llama.cpp's LoRA adapter file, and merged copies of the shipped base GGUF.

    plan = plan_tensors(adapter, base)                   # GGUF name -> LoraModule, checked
    write_adapter_gguf(adapter, base, plan, out / "adapter.gguf")
    report = write_merged_gguf(adapter, base, plan, out / "merged-f16.gguf", "F16", chat_template)

Adapter file (llama.cpp `src/llama-adapter.cpp`, `llama_adapter_lora_init_impl`; written as llama.cpp's
`convert_lora_to_gguf.py` does): `general.architecture` = the base's, `general.type = "adapter"`,
`adapter.type = "lora"`, `adapter.lora.alpha` (float32); per adapted weight `<name>.lora_a`, numpy
(r, in) = ggml ne (in, r), and `<name>.lora_b`, numpy (out, r) = ne (r, out), both F16. llama.cpp
scales `b @ a` by `alpha / rank`, rank = `lora_b` ne[0] (`llama_adapter_lora_weight::get_scale`), so the
stored alpha is PEFT's scale times the rank: `lora_alpha`, or `lora_alpha * sqrt(r)` with rsLoRA
(`convert_lora_to_gguf.py` writes `lora_alpha` unchanged, which is wrong for rsLoRA).

Merged file: every metadata key and every tensor byte of the base GGUF copied (gguf's
`gguf_new_metadata.py` recipe), except the adapted weights, which are de-quantized, given the delta,
and stored as F16, Q8_0 or Q4_1; `tokenizer.chat_template` is the job's template.
"""

from __future__ import annotations

import dataclasses
import math
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from lcsb_core.errors import ExportError
from lcsb_core.export.adapter import LoraAdapter, LoraModule
from lcsb_core.export.base import BaseGGUF

MERGE_TYPES = ("F16", "Q8_0", "Q4_1")


def plan_tensors(adapter: LoraAdapter, base: BaseGGUF) -> dict[str, LoraModule]:
    """Each adapted module under its GGUF weight name, in the base file's tensor order.

    Raises:
        ExportError: a module has no GGUF tensor in this base (wrong base model, or a module the
            format cannot hold) or its shape differs from the base tensor's.
    """
    plan: dict[str, LoraModule] = {}
    for module in adapter.modules.values():
        name = base.gguf_name(module.name)
        if name is None or name not in base.tensors:
            raise ExportError(f"adapted module {module.name} has no tensor in the base GGUF "
                              f"{base.path.name} ({base.arch}); it does not export")
        out_dim, in_dim = module.b.shape[0], module.a.shape[1]
        if base.shape(name) != (out_dim, in_dim):
            raise ExportError(f"adapted module {module.name} is {out_dim}x{in_dim} but {name} in "
                              f"{base.path.name} is {base.shape(name)[0]}x{base.shape(name)[1]}: wrong base model")
        plan[name] = module
    return {name: plan[name] for name in base.tensors if name in plan}


def gguf_alpha(plan: dict[str, LoraModule]) -> float:
    """The one `adapter.lora.alpha` that makes llama.cpp's `alpha / rank` equal PEFT's scale on every
    tensor (scale * rank).

    Raises:
        ExportError: the modules need different alphas (rsLoRA with mixed ranks).
    """
    alphas = {name: m.scale * m.rank for name, m in plan.items()}
    first = next(iter(alphas.values()))
    if any(not math.isclose(a, first, rel_tol=1e-6) for a in alphas.values()):
        raise ExportError("the adapter's tensors need different adapter.lora.alpha values (rsLoRA with a "
                          "rank_pattern); a GGUF adapter holds one: use a merged format")
    return first


def write_adapter_gguf(adapter: LoraAdapter, base: BaseGGUF, plan: dict[str, LoraModule], out: Path) -> Path:
    """Write llama.cpp's LoRA adapter file for `base` at `out` (F16 A and B; layout in the module doc).
    Returns `out`."""
    import gguf

    writer = gguf.GGUFWriter(str(out), base.arch)
    writer.add_type(gguf.GGUFType.ADAPTER)
    writer.add_string(gguf.Keys.Adapter.TYPE, "lora")
    writer.add_float32(gguf.Keys.Adapter.LORA_ALPHA, gguf_alpha(plan))
    for name, module in plan.items():
        writer.add_tensor(name + ".lora_a", module.a.astype(np.float16))
        writer.add_tensor(name + ".lora_b", np.ascontiguousarray(base.to_gguf_rows(name, module.b)).astype(np.float16))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return out


@dataclass(frozen=True)
class MergeReport:
    """What a merged file kept of the adapter, measured on the weights over all adapted tensors, where
    `base` is the shipped tensor de-quantized, `stored` what the file holds de-quantized, and
    `change = stored - base`: `effect_kept` = <change, delta> / <delta, delta>, the share of the delta
    the file keeps along its direction (1.0: all of it; a 4-bit requantization that rounds base + delta
    back to the base's grid point keeps ~0), and `rel_error` = ||change - delta|| / ||delta|| (rounding
    noise included: F16 rounding of the base alone is ~10 % of a short job's delta)."""

    path: Path
    qtype: str
    effect_kept: float
    rel_error: float
    tensors_merged: int


def _encode(values: np.ndarray, qtype: str) -> tuple[np.ndarray, Any, np.ndarray]:
    """(data to write, its GGML type, the values it decodes to)."""
    import gguf

    if qtype == "F16":
        half = values.astype(np.float16)
        return half, gguf.GGMLQuantizationType.F16, half.astype(np.float32)
    ggml_type = gguf.GGMLQuantizationType[qtype]
    packed = gguf.quants.quantize(values, ggml_type)
    return packed, ggml_type, gguf.quants.dequantize(packed, ggml_type)


def write_merged_gguf(base: BaseGGUF, plan: dict[str, LoraModule], out: Path, qtype: str,
                      chat_template: str | None) -> MergeReport:
    """Write `base` with the adapter merged into the planned tensors (stored as `qtype`, one of
    `MERGE_TYPES`) and `chat_template` as `tokenizer.chat_template` (None: the base's is kept).

    Raises:
        ExportError: `qtype` is not one of `MERGE_TYPES`.
    """
    return write_merged_ggufs(base, plan, {qtype: out}, chat_template)[qtype]


def _merge_tensor(base: BaseGGUF, name: str, module: LoraModule, qtypes: list[str]) -> dict[str, tuple]:
    """For each qtype: (encoded data, GGML type, |change - delta|^2, |delta|^2, <change, delta>)."""
    # llama's q/k row permutation commutes with the product: permute B's rows (out, r), not the delta's
    delta = dataclasses.replace(module, b=base.to_gguf_rows(name, module.b)).delta()
    shipped = base.dequantized(name)
    wanted = shipped + delta
    flat_delta = delta.ravel()
    delta2 = float(np.dot(flat_delta, flat_delta))
    out = {}
    for qtype in qtypes:
        data, ggml_type, decoded = _encode(wanted, qtype)
        change = (decoded - shipped).ravel()
        miss = change - flat_delta
        out[qtype] = (data, ggml_type, float(np.dot(miss, miss)), delta2, float(np.dot(change, flat_delta)))
    return out


def _ggml_type(qtype: str) -> Any:
    import gguf

    return gguf.GGMLQuantizationType[qtype]


def _stored_layout(shape: tuple[int, int], qtype: str) -> tuple[tuple[int, ...], Any, int]:
    """(the numpy shape, dtype and byte count) `_encode` gives a (rows, cols) tensor in `qtype`."""
    import gguf

    if qtype == "F16":
        return shape, np.dtype(np.float16), shape[0] * shape[1] * 2
    byte_shape = gguf.quants.quant_shape_to_byte_shape(shape, _ggml_type(qtype))
    return byte_shape, np.dtype(np.uint8), int(np.prod(byte_shape))


def _pad(f: Any, n: int, align: int) -> None:
    """Zero bytes up to the next multiple of `align` after `n` (gguf's `GGUFWriter.write_padding`)."""
    f.write(bytes(-n % align))


def _copy_range(src: int, dst: Any, offset: int, nbytes: int) -> None:
    """`nbytes` of the file `src` (a descriptor) from `offset` appended to the open file `dst`, by the
    kernel (`os.copy_file_range`; a 16 MiB read/write loop where the file system refuses it): nothing
    is mapped or held in this process, however large the tensor."""
    import os

    dst.flush()
    out = dst.fileno()
    done = 0
    while done < nbytes:
        try:
            n = os.copy_file_range(src, out, nbytes - done, offset + done)
        except OSError:
            n = 0
        if n <= 0:
            block = os.pread(src, min(nbytes - done, 1 << 24), offset + done)
            if not block:
                raise ExportError(f"base GGUF ended {nbytes - done} bytes early", field=None)
            n = os.write(out, block)
        done += n
    dst.seek(0, os.SEEK_END)


def write_merged_ggufs(base: BaseGGUF, plan: dict[str, LoraModule], outs: dict[str, Path],
                       chat_template: str | None, *, threads: int = 2) -> dict[str, MergeReport]:
    """`write_merged_gguf` for several types at once (qtype -> path), streamed: every file's header
    (metadata and tensor infos, by gguf's `GGUFWriter`; the encoded sizes are known from the shapes)
    is written first, then the data section tensor by tensor in the base's order, as the GGUF spec lays
    it out (each tensor at a multiple of the alignment, zero padded). Tensors without an adapter are
    copied from the base file by the kernel (`os.copy_file_range`), never mapped or read into memory;
    each adapted tensor is read from the file (`BaseGGUF.tensor_data`), de-quantized and given its delta
    once and encoded per type (on `threads` threads, a few tensors ahead: numpy's kernels release the
    GIL). Memory: a few adapted tensors at a time (a few MiB), plus the base header `base` holds parsed.

    Raises:
        ExportError: a qtype is not one of `MERGE_TYPES`.
    """
    import gguf
    from threadpoolctl import threadpool_limits

    bad = [q for q in outs if q not in MERGE_TYPES]
    if bad:
        raise ExportError(f"merged GGUF type must be one of {', '.join(MERGE_TYPES)}, got {bad[0]!r}")
    qtypes = list(outs)
    reader = base.reader
    align = int(reader.alignment)
    files = {}
    for qtype, out in outs.items():
        writer = gguf.GGUFWriter(str(out), base.arch, endianess=reader.endianess)
        writer.data_alignment = align  # the tensor-info offsets; `general.alignment` is copied below
        for f in reader.fields.values():
            if f.name == gguf.Keys.General.ARCHITECTURE or f.name.startswith("GGUF."):
                continue
            if f.name == gguf.Keys.Tokenizer.CHAT_TEMPLATE and chat_template is not None:
                continue
            sub_type = f.types[-1] if f.types[0] == gguf.GGUFValueType.ARRAY else None
            writer.add_key_value(f.name, f.contents(), f.types[0], sub_type=sub_type)
        if chat_template is not None:
            writer.add_chat_template(chat_template)
        for t in reader.tensors:
            if t.name in plan:
                shape, dtype, nbytes = _stored_layout(base.shape(t.name), qtype)
                writer.add_tensor_info(t.name, shape, dtype, nbytes, _ggml_type(qtype))
            else:
                writer.add_tensor_info(t.name, t.data.shape, t.data.dtype, t.n_bytes, t.tensor_type)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_ti_data_to_file()
        writer.close()
        files[qtype] = open(out, "r+b")  # closed in the finally below
        files[qtype].seek(0, 2)  # not "ab": copy_file_range refuses an O_APPEND target
    swap = (reader.endianess == gguf.GGUFEndian.BIG) != (sys.byteorder == "big")
    sums = {q: [0.0, 0.0, 0.0] for q in qtypes}  # |change - delta|^2, |delta|^2, <change, delta>
    step = 2 * max(1, threads)
    try:
        # one BLAS thread per pool thread: OpenBLAS's own threads, woken for every small B @ A (r = 16) and
        # dot product, spin between calls and took half the CPU on 2 cores (SmolLM2's merge, one thread:
        # 12.1 s of CPU with OpenBLAS's default threads, 5.1 s with one)
        with threadpool_limits(limits=1, user_api="blas"), ThreadPoolExecutor(max_workers=max(1, threads)) as pool:
            for i in range(0, len(reader.tensors), step):
                chunk = reader.tensors[i:i + step]
                merged = pool.map(lambda t: _merge_tensor(base, t.name, plan[t.name], qtypes)
                                  if t.name in plan else None, chunk)
                for t, result in zip(chunk, merged, strict=True):
                    for qtype, f in files.items():
                        _pad(f, f.tell(), align)
                        if result is None:
                            _copy_range(base.fileno, f, t.data_offset, t.n_bytes)
                            _pad(f, t.n_bytes, align)
                            continue
                        data, _, err2, delta2, dot = result[qtype]
                        f.write((data.byteswap() if swap else data).tobytes())
                        _pad(f, data.nbytes, align)
                        for k, v in enumerate((err2, delta2, dot)):
                            sums[qtype][k] += v
    finally:
        for f in files.values():
            f.close()
    reports = {}
    for qtype in qtypes:
        err2, delta2, dot = sums[qtype]
        kept, rel = (dot / delta2, math.sqrt(err2 / delta2)) if delta2 > 0 else (1.0, 0.0)
        reports[qtype] = MergeReport(Path(outs[qtype]), qtype, kept, rel, len(plan))
    return reports
