"""Base-model loading errors say what to do; configs name the bad field."""

import json

import pytest
import torch

from lcsb_core.errors import ConfigError, ModelLoadError
from lcsb_core.models.loading import load_base_model, load_tokenizer, resolve_device, resolve_model_path
from lcsb_core.training.config import TrainConfig


def test_missing_folder(tmp_path):
    with pytest.raises(ModelLoadError, match="no such folder.*local Hugging Face model folder"):
        resolve_model_path(str(tmp_path / "nope"))


def test_folder_without_config(tmp_path):
    with pytest.raises(ModelLoadError, match="has no config.json"):
        resolve_model_path(str(tmp_path))


def test_unsupported_architecture(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "bert", "hidden_size": 8}))
    with pytest.raises(ModelLoadError, match="model type 'bert' is not supported; supported"):
        load_base_model(tmp_path, quantization="bf16", device=torch.device("cpu"))


def test_missing_chat_template_is_reported(tmp_path):
    from lcsb_core.models.gguf_import import ensure_default_model

    src = ensure_default_model()
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (tmp_path / name).write_text((src / name).read_text())
    cfg = json.loads((tmp_path / "tokenizer_config.json").read_text())
    cfg.pop("chat_template", None)
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(cfg))
    assert load_tokenizer(tmp_path).pad_token_id is not None
    with pytest.raises(ModelLoadError, match="no chat template"):
        load_tokenizer(tmp_path, require_chat_template=True)


def test_cuda_device_resolution():
    if torch.cuda.is_available():
        assert resolve_device("cuda").type == "cuda" and resolve_device("auto").type == "cuda"
    else:
        assert resolve_device("auto").type == "cpu"
        with pytest.raises(ModelLoadError, match="no CUDA device"):
            resolve_device("cuda")


@pytest.mark.parametrize("raw,field", [
    ({"lora": {"rank": 0}}, "lora.rank"),
    ({"lcsb": {"schedule": "zigzag"}}, "lcsb.schedule"),
    ({"lcsb": {"k": 2, "fraction": 0.5}}, "lcsb"),
    ({"optim": {"learning_rate": 5}}, "optim.learning_rate"),
    ({"model": {"quantization": "int3"}}, "model.quantization"),
    ({"lora": {"rnak": 8}}, "lora.rnak"),
    ({"batch_size": 0}, "batch_size"),
    ({"data": {"train_file": "x", "max_seq_len": 4}}, "data.max_seq_len"),
])
def test_config_errors_name_the_field(raw, field):
    raw = {"data": {"train_file": "train.jsonl"}, **raw} if "data" not in raw else raw
    with pytest.raises(ConfigError, match=field.replace(".", r"\.")):
        TrainConfig.from_dict(raw)
