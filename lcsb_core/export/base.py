"""The shipped base GGUF as the export sees it: architecture, head counts, tensors, tokens (the `gguf`
package's reader, memory-mapped; no torch).

    base = BaseGGUF.open(shipped_gguf_path(SMOLLM2))
    base.gguf_name("model.layers.0.self_attn.q_proj")   # "blk.0.attn_q.weight"
    base.to_gguf_rows("blk.0.attn_q.weight", delta)      # llama.cpp's row order for q/k (llama only)

Hugging Face -> GGUF tensor names come from gguf's own `TensorNameMap` (the table llama.cpp's
`convert_hf_to_gguf.py` uses). For `llama`, that converter permutes the rows of q_proj and k_proj
(`LlamaModel.permute`: per head, the rotary pairs (i, i + d/2) become adjacent rows (2i, 2i+1), the
layout of llama.cpp's non-NeoX RoPE); GGUF LoRA B matrices and merged deltas get the same permutation.
`gemma3` uses NeoX RoPE and keeps Hugging Face's row order.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from lcsb_core.errors import ExportError

SUPPORTED_ARCHITECTURES = ("llama", "gemma3")


def open_reader(path: Path) -> Any:
    """`gguf.GGUFReader(path)`, its header parsed through a plain-ndarray view of the same memory map.

    The stock reader slices its `np.memmap` once per token and merge while it builds the fields, and
    each memmap slice runs numpy's memmap bookkeeping: 15 s for SmolLM2's 49,152 tokens and 35 s for
    Gemma's 262,144 on 2 loaded cores. Slicing the plain view is the same bytes without that cost;
    the fields and tensors are the stock reader's (tests/core/test_export_gguf.py compares them).
    """
    import gguf

    class _Reader(gguf.GGUFReader):
        def _get(self, offset: int, dtype: Any, count: int = 1, override_order: Any = None) -> np.ndarray:
            plain = self.__dict__.get("_plain")
            if plain is None or plain.base is not self.data:
                plain = self.__dict__["_plain"] = self.data.view(np.ndarray)
            count = int(count)
            end = offset + np.dtype(dtype).itemsize * count
            arr = plain[offset:end].view(dtype=dtype)[:count]
            return arr.view(arr.dtype.newbyteorder(self.byte_order if override_order is None else override_order))

    return _Reader(path)


def llama_permute(rows: np.ndarray, n_head: int) -> np.ndarray:
    """llama.cpp's q/k row permutation (`convert_hf_to_gguf.py`, `LlamaModel.permute`) of a
    (n_head * head_dim, ...) array: within each head, row i < d/2 goes to 2i and row d/2 + i to 2i + 1."""
    shape = rows.shape
    return rows.reshape(n_head, 2, shape[0] // n_head // 2, *shape[1:]).swapaxes(1, 2).reshape(shape)


@dataclass
class BaseGGUF:
    """A base model's GGUF file, read-only. `tensors` by GGUF name (gguf `ReaderTensor`s whose `data`
    is a memory-mapped view); `n_head`, `n_head_kv`, `n_blocks` from `<arch>.attention.head_count`,
    `.head_count_kv` and `.block_count`."""

    path: Path
    reader: Any
    arch: str
    n_head: int
    n_head_kv: int
    n_blocks: int
    tensors: dict[str, Any] = field(repr=False)

    @classmethod
    def open(cls, path: Path) -> BaseGGUF:
        """Read `path`'s header (tensor data stays memory-mapped).

        Raises:
            ExportError: the architecture is not one this export supports.
        """
        import gguf

        reader = open_reader(path)
        arch_field = reader.get_field(gguf.Keys.General.ARCHITECTURE)
        arch = "" if arch_field is None else str(arch_field.contents())
        if arch not in SUPPORTED_ARCHITECTURES:
            raise ExportError(f"base GGUF architecture {arch!r} does not export; supported: "
                              f"{', '.join(SUPPORTED_ARCHITECTURES)}", field=None)

        def num(key: str) -> int:
            f = reader.get_field(key.format(arch=arch))
            return int(f.contents()) if f is not None else 0

        n_head = num(gguf.Keys.Attention.HEAD_COUNT)
        return cls(Path(path), reader, arch, n_head, num(gguf.Keys.Attention.HEAD_COUNT_KV) or n_head,
                   num(gguf.Keys.LLM.BLOCK_COUNT), {t.name: t for t in reader.tensors})

    def field(self, key: str) -> Any:
        """A metadata value (`contents()`), or None when absent."""
        f = self.reader.get_field(key)
        return None if f is None else f.contents()

    @property
    def tied_embeddings(self) -> bool:
        """True when the file has no `output.weight`: llama.cpp then uses `token_embd.weight` as the head."""
        return "output.weight" not in self.tensors

    @property
    def chat_template(self) -> str | None:
        return self.field("tokenizer.chat_template")

    def token_text(self, token_id: int) -> str:
        """The vocabulary string of `token_id` (`tokenizer.ggml.tokens`)."""
        f = self.reader.get_field("tokenizer.ggml.tokens")
        return bytes(f.parts[f.data[token_id]]).decode("utf-8")

    @cached_property
    def _name_map(self) -> Any:
        import gguf

        arch = {name: a for a, name in gguf.MODEL_ARCH_NAMES.items()}[self.arch]
        return gguf.get_tensor_name_map(arch, self.n_blocks)

    def gguf_name(self, hf_module: str) -> str | None:
        """The GGUF weight name of a Hugging Face linear module (`model.layers.0.mlp.up_proj` ->
        `blk.0.ffn_up.weight`), or None when gguf's name map has none for this architecture."""
        return self._name_map.get_name(hf_module + ".weight", try_suffixes=(".weight",))

    def shape(self, name: str) -> tuple[int, int]:
        """(out, in) of a 2-D tensor (GGUF stores ne = (in, out))."""
        ne = self.tensors[name].shape
        return int(ne[1]), int(ne[0])

    def to_gguf_rows(self, name: str, rows: np.ndarray) -> np.ndarray:
        """`rows` (out, ...) of the Hugging Face weight behind GGUF tensor `name`, in the GGUF file's
        row order: permuted for `llama`'s attn_q (n_head) and attn_k (n_head_kv), unchanged otherwise."""
        if self.arch == "llama":
            if name.endswith("attn_q.weight"):
                return llama_permute(rows, self.n_head)
            if name.endswith("attn_k.weight"):
                return llama_permute(rows, self.n_head_kv)
        return rows

    @cached_property
    def _file(self) -> Any:
        return open(self.path, "rb")  # closed with this object (garbage collection)

    @property
    def fileno(self) -> int:
        """A read-only descriptor of the file (for `os.pread` / `os.copy_file_range`)."""
        return int(self._file.fileno())

    def tensor_data(self, name: str) -> np.ndarray:
        """Tensor `name`'s stored data as the reader's array (its dtype and shape), read from the file
        into memory (`os.pread`): the reader's `data` is a view of the memory map, and every page read
        through it stays resident in this process (the whole base, once every tensor has been read)."""
        import os

        t = self.tensors[name]
        raw = os.pread(self.fileno, t.n_bytes, t.data_offset)
        return np.frombuffer(raw, dtype=t.data.dtype).reshape(t.data.shape)

    def dequantized(self, name: str) -> np.ndarray:
        """Tensor `name` as float32 (out, in) (gguf's numpy dequantizers), read with `tensor_data`."""
        import gguf

        t = self.tensors[name]
        return gguf.quants.dequantize(self.tensor_data(name), t.tensor_type).astype(np.float32, copy=False)
