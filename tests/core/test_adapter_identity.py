"""A saved adapter names its base by public hub id, never by the folder it was loaded from, so it loads
on another machine (`AutoPeftModelForCausalLM`, llama.cpp's `convert_lora_to_gguf`)."""

from __future__ import annotations

import json

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from lcsb_core.models.gguf_import import DEFAULT_MODEL_HUB_ID, ensure_default_model
from lcsb_core.models.identity import public_model_id
from lcsb_core.models.loading import load_base_model
from lcsb_core.training.checkpoint import save_adapter
from lcsb_core.training.config import LoraSettings
from lcsb_core.training.lora import apply_lora


def _tiny_folder(path, name_or_path=None):
    torch.manual_seed(0)
    cfg = LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, vocab_size=64, max_position_embeddings=64)
    LlamaForCausalLM(cfg).save_pretrained(path)
    if name_or_path is not None:
        config = json.loads((path / "config.json").read_text())
        (path / "config.json").write_text(json.dumps({**config, "_name_or_path": name_or_path}))
    return path


def test_public_model_id_rules(tmp_path):
    assert public_model_id(ensure_default_model()) == DEFAULT_MODEL_HUB_ID == "HuggingFaceTB/SmolLM2-135M-Instruct"
    assert public_model_id(_tiny_folder(tmp_path / "my-model")) == "my-model"
    assert public_model_id(_tiny_folder(tmp_path / "b", "acme/tiny-chat")) == "acme/tiny-chat"
    assert public_model_id(_tiny_folder(tmp_path / "c", str(tmp_path / "b"))) == "c"  # a recorded path is not an id


def test_saved_adapter_names_the_hub_id_not_the_folder(tmp_path):
    folder = _tiny_folder(tmp_path / "models" / "tiny", "acme/tiny-chat")
    model = apply_lora(load_base_model(folder, quantization="fp32", device=torch.device("cpu")),
                       LoraSettings(rank=2, alpha=4, target_modules=("q_proj", "v_proj")), seed=0)
    out = save_adapter(model, [p for p in model.parameters() if p.requires_grad], tmp_path / "adapter")
    config = json.loads((out / "adapter_config.json").read_text())
    assert config["base_model_name_or_path"] == "acme/tiny-chat"
    readme = (out / "README.md").read_text()
    assert "base_model: acme/tiny-chat" in readme
    for f in out.iterdir():
        assert str(tmp_path) not in f.read_bytes().decode("utf-8", "replace"), f.name
