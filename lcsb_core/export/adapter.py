"""A PEFT LoRA adapter folder read with numpy and safetensors (no torch).

    adapter = read_adapter(run / "adapter")       # adapter_config.json + adapter_model.safetensors
    adapter.modules["model.layers.0.self_attn.q_proj"].delta()   # (out, in) float32: scale * B @ A

PEFT saves `base_model.model.<module>.lora_A.weight` (r, in) and `...lora_B.weight` (out, r); the
module's scale is `lora_alpha / r`, or `lora_alpha / sqrt(r)` with rsLoRA (PEFT `LoraLayer.update_layer`),
where r is the module's rank (`rank_pattern` may set it per module; the tensors' shapes say it).
"""

from __future__ import annotations

import json
import math
import re
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from lcsb_core.errors import AdapterError, ExportError

ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = "adapter_model.safetensors"
_KEY = re.compile(r"^base_model\.model\.(?P<module>.+)\.lora_(?P<ab>[AB])\.weight$")


@dataclass(frozen=True)
class LoraModule:
    """One adapted linear layer. `a`: (r, in) float32, `b`: (out, r) float32, `scale`: PEFT's
    multiplier of `b @ a` for this module (alpha/r, or alpha/sqrt(r) with rsLoRA)."""

    name: str
    a: np.ndarray
    b: np.ndarray
    scale: float

    @property
    def rank(self) -> int:
        return int(self.a.shape[0])

    def delta(self) -> np.ndarray:
        """The weight change PEFT applies, (out, in) float32: `scale * b @ a`."""
        delta = (self.b @ self.a).astype(np.float32, copy=False)
        delta *= self.scale  # in place: one (out, in) array, not three
        return delta


@dataclass(frozen=True)
class LoraAdapter:
    """A PEFT LoRA adapter: its parsed config and its modules by qualified name (without PEFT's
    `base_model.model.` prefix, e.g. `model.layers.3.mlp.down_proj`)."""

    config: dict
    modules: dict[str, LoraModule]

    @property
    def rank(self) -> int:
        return int(self.config["r"])

    @property
    def alpha(self) -> float:
        return float(self.config["lora_alpha"])

    @property
    def use_rslora(self) -> bool:
        return bool(self.config.get("use_rslora"))

    @property
    def targets(self) -> list[str]:
        """The adapted module kinds (`q_proj`, ...), sorted."""
        return sorted({name.rsplit(".", 1)[-1] for name in self.modules})


def module_scale(alpha: float, rank: int, *, use_rslora: bool) -> float:
    """PEFT's LoRA scale: alpha / r, or alpha / sqrt(r) with rsLoRA (Kalajdzievski 2023)."""
    return alpha / math.sqrt(rank) if use_rslora else alpha / rank


def read_config(folder: Path) -> dict:
    """The parsed `adapter_config.json` of the adapter `folder`.

    Raises:
        AdapterError: the file is missing, not JSON, or not a JSON object.
    """
    path = Path(folder) / ADAPTER_CONFIG
    try:
        config = json.loads(path.read_text())
    except OSError as exc:
        raise AdapterError(f"{ADAPTER_CONFIG} cannot be read ({exc.strerror or type(exc).__name__})") from exc
    except ValueError as exc:
        raise AdapterError(f"{ADAPTER_CONFIG} is not valid JSON ({exc})") from exc
    if not isinstance(config, dict):
        raise AdapterError(f"{ADAPTER_CONFIG} is not a JSON object")
    return config


def _load_tensors(path: Path) -> dict[str, np.ndarray]:
    """The safetensors file's tensors as float32 numpy arrays. numpy has no bfloat16, so a bf16 file
    (safetensors' numpy loader refuses it) is read from its documented layout: 8-byte little-endian
    header length, JSON header, then raw little-endian data."""
    from safetensors.numpy import load_file

    try:
        return {k: v.astype(np.float32) for k, v in load_file(str(path)).items()}
    except Exception:  # noqa: BLE001 - safetensors' own error type for bf16 or a damaged file
        pass
    try:
        return _load_raw(path)
    except (ValueError, KeyError, struct.error) as exc:
        raise AdapterError(f"{path.name} is not a readable safetensors file") from exc


def _load_raw(path: Path) -> dict[str, np.ndarray]:
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    out: dict[str, np.ndarray] = {}
    for key, info in header.items():
        if key == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        data = raw[8 + n + begin:8 + n + end]
        if info["dtype"] == "BF16":
            bits = np.frombuffer(data, dtype="<u2").astype(np.uint32) << 16
            arr = bits.view(np.float32)
        else:
            arr = np.frombuffer(data, dtype={"F32": "<f4", "F16": "<f2", "F64": "<f8"}[info["dtype"]])
        out[key] = arr.reshape(info["shape"]).astype(np.float32)
    return out


def read_adapter(folder: Path) -> LoraAdapter:
    """Read a PEFT LoRA adapter folder (`adapter_config.json`, `adapter_model.safetensors`).

    Raises:
        AdapterError: a missing or unreadable file, a module missing one of A and B, A and B shapes
            that do not form a rank-r product, no LoRA tensors (an `ExportError`, code `adapter_corrupt`).
        ExportError: a tensor that is neither lora_A nor lora_B of a module (DoRA magnitudes, embedding
            LoRA, modules_to_save copies): what the format cannot hold.
    """
    folder = Path(folder)
    config = read_config(folder)
    weights = folder / ADAPTER_WEIGHTS
    if not weights.is_file():
        raise AdapterError(f"{ADAPTER_WEIGHTS} is missing (only safetensors adapters export)")
    pairs: dict[str, dict[str, np.ndarray]] = {}
    for key, value in _load_tensors(weights).items():
        match = _KEY.match(key)
        if match is None:
            raise ExportError(f"adapter tensor {key} is not a LoRA A or B matrix of a linear layer; "
                              "only plain LoRA on linear layers exports")
        pairs.setdefault(match["module"], {})[match["ab"]] = value
    use_rslora = bool(config.get("use_rslora"))
    alpha = float(config.get("lora_alpha", 0))
    modules: dict[str, LoraModule] = {}
    for name, ab in sorted(pairs.items()):
        if set(ab) != {"A", "B"}:
            raise AdapterError(f"adapter module {name} has lora_{''.join(ab)} but not both A and B")
        a, b = ab["A"], ab["B"]
        if a.ndim != 2 or b.ndim != 2 or a.shape[0] != b.shape[1]:
            raise AdapterError(f"adapter module {name}: lora_A {a.shape} and lora_B {b.shape} do not form "
                               "a rank-r product")
        modules[name] = LoraModule(name, a, b, module_scale(alpha, a.shape[0], use_rslora=use_rslora))
    if not modules:
        raise AdapterError(f"{ADAPTER_WEIGHTS} holds no LoRA tensors")
    return LoraAdapter(config, modules)
