"""The YAML job spec of `lcsb jobs submit`: the fields of `POST /v1/fine_tuning/jobs`, with local
dataset paths allowed in place of file ids (uploaded first).

    model: SmolLM2-135M-Instruct
    training_path: data/train.jsonl          # or training_file: file-...
    validation_path: data/valid.jsonl        # or validation_file: file-... (optional)
    hyperparameters: {n_epochs: 1, batch_size: 4}
    method:
      type: supervised                       # or dpo (a preference file; method.dpo.hyperparameters.beta)
      lora: {rank: 16, alpha: 32}
      lcsb: {schedule: topfull, fraction: 0.25}
    suffix: gsm8k
    seed: 42
    metadata: {project: demo}

Paths are relative to the spec file's folder. Unknown fields are errors that name the field; the
values themselves are checked by the service (400 naming the parameter).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from lcsb_client.errors import ClientError

REQUEST_FIELDS = ("model", "training_file", "validation_file", "hyperparameters", "method", "suffix", "seed",
                  "metadata")
PATH_FIELDS = {"training_path": "training_file", "validation_path": "validation_file"}
MAPPING_FIELDS = ("hyperparameters", "method", "metadata")


def _invalid(message: str, param: str | None = None) -> ClientError:
    return ClientError("invalid_spec", message, param)


def apply_overrides(raw: dict, overrides: list[str]) -> dict:
    """Set `a.b=value` items (values parsed as YAML) in `raw`, creating mappings on the way."""
    for item in overrides:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise _invalid(f"--set expects key=value, got {item!r}", "--set")
        node = raw
        *parents, leaf = key.split(".")
        for part in parents:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise _invalid(f"--set {key}: {part} is not a mapping", key)
        node[leaf] = yaml.safe_load(value)
    return raw


METHOD_TYPES = ("supervised", "dpo")  # OpenAI's method.type values the service trains


def apply_method(raw: dict, method: str | None, beta: float | None) -> dict:
    """`lcsb jobs submit --method TYPE --beta B`: set `method.type` and DPO's
    `method.dpo.hyperparameters.beta` in `raw` (the service checks beta's range). With `beta`, the spec's
    top-level `hyperparameters` move into `method.dpo.hyperparameters` (the same settings for a DPO job;
    the service takes them from one place only).

    Raises:
        ClientError: `invalid_spec` for an unknown type, or `--beta` on a job whose type is not dpo.
    """
    if method is None and beta is None:
        return raw
    spec_method = raw.get("method")
    if spec_method is not None and not isinstance(spec_method, dict):
        raise _invalid(f"method must be a mapping, got {type(spec_method).__name__}", "method")
    node = raw.setdefault("method", {})
    if method is not None:
        if method not in METHOD_TYPES:
            raise _invalid(f"--method must be one of {', '.join(METHOD_TYPES)}, got {method!r}", "--method")
        node["type"] = method
    if beta is not None:
        if node.get("type") != "dpo":
            raise _invalid("--beta is DPO's: give --method dpo (or method.type: dpo in the spec)", "--beta")
        dpo = node.get("dpo") or {}
        top = raw.pop("hyperparameters", None) or {}
        if not isinstance(top, dict):
            raise _invalid(f"hyperparameters must be a mapping, got {type(top).__name__}", "hyperparameters")
        node["dpo"] = {**dpo, "hyperparameters": {**top, **(dpo.get("hyperparameters") or {}), "beta": beta}}
    return raw


@dataclass
class JobSpec:
    """A checked spec: `request` holds the job fields given directly; `training_path` /
    `validation_path` are local files to upload, whose ids complete the request."""

    request: dict[str, Any]
    training_path: Path | None = None
    validation_path: Path | None = None

    @classmethod
    def load(cls, path: Path, overrides: list[str] | None = None, *, method: str | None = None,
             beta: float | None = None) -> JobSpec:
        """Read and check a spec file; `overrides` (`--set`), then `method` and `beta` (`apply_method`).

        Raises:
            ClientError: `invalid_spec` (YAML syntax, unknown or conflicting fields, wrong types) or
                `file_not_found` (a dataset path that is not a file).
        """
        try:
            raw = yaml.safe_load(path.read_text()) or {}
        except (OSError, yaml.YAMLError) as exc:
            raise _invalid(f"cannot read the job spec {path}: {exc}") from None
        if not isinstance(raw, dict):
            raise _invalid(f"{path}: the job spec must be a mapping of fields, got {type(raw).__name__}")
        return cls.from_dict(apply_method(apply_overrides(raw, overrides or []), method, beta), base_dir=path.parent)

    @classmethod
    def from_dict(cls, raw: dict[str, Any], base_dir: Path = Path(".")) -> JobSpec:
        unknown = [k for k in raw if k not in REQUEST_FIELDS and k not in PATH_FIELDS]
        if unknown:
            raise _invalid(f"unknown field {unknown[0]!r} in the job spec (fields: "
                           f"{', '.join(REQUEST_FIELDS + tuple(PATH_FIELDS))})", str(unknown[0]))
        if not isinstance(raw.get("model"), str) or not raw["model"]:
            raise _invalid("the job spec needs a model name", "model")
        for name in MAPPING_FIELDS:
            if raw.get(name) is not None and not isinstance(raw[name], dict):
                raise _invalid(f"{name} must be a mapping, got {type(raw[name]).__name__}", name)
        paths: dict[str, Path | None] = {}
        for path_field, id_field in PATH_FIELDS.items():
            if raw.get(path_field) is not None and raw.get(id_field) is not None:
                raise _invalid(f"give {path_field} or {id_field}, not both", path_field)
            value = raw.get(path_field)
            if value is not None:
                local = (base_dir / Path(str(value)).expanduser()).resolve()  # absolute, without ".."
                if not local.is_file():
                    raise ClientError("file_not_found", f"{path_field}: no such file {local}", path_field)
                paths[path_field] = local
        if raw.get("training_file") is None and "training_path" not in paths:
            raise _invalid("the job spec needs training_path (a local file) or training_file (an id)",
                           "training_path")
        request = {k: raw[k] for k in REQUEST_FIELDS if raw.get(k) is not None}
        return cls(request, paths.get("training_path"), paths.get("validation_path"))

    def to_request(self, training_file: str | None = None, validation_file: str | None = None) -> dict[str, Any]:
        """The job request, with the ids of the uploaded datasets filled in."""
        request = dict(self.request)
        if training_file:
            request["training_file"] = training_file
        if validation_file:
            request["validation_file"] = validation_file
        return request
