"""The GGUF converters (`lcsb_core.export`) on a tiny llama base GGUF written here: tensor names and
shapes as llama.cpp's adapter loader checks them, the q/k row permutation (checked against RoPE itself),
alpha over rank (and rsLoRA) as llama.cpp's `get_scale` computes it, merged tensors, copied metadata and
tensors, and the refusals. One test checks the permutation on the real shipped SmolLM2 GGUF."""

from __future__ import annotations

import dataclasses
import errno
import json
import math
import os
from pathlib import Path

import gguf
import numpy as np
import pytest
from safetensors.numpy import save_file

from lcsb_core.errors import ExportError
from lcsb_core.export.adapter import read_adapter
from lcsb_core.export.base import BaseGGUF, llama_permute
from lcsb_core.export.bundle import export_adapter
from lcsb_core.export.convert import gguf_alpha, plan_tensors, write_adapter_gguf, write_merged_gguf
from lcsb_core.export.formats import parse_formats, refusals
from lcsb_core.export.templates import (
    PLAIN_TEMPLATE,
    ollama_prompt_format,
    render,
    render_go,
    render_ollama,
    training_template,
)
from lcsb_core.models.catalog import SMOLLM2
from lcsb_core.models.gguf_import import sha256_of

HIDDEN, FFN, HEADS, KV_HEADS, BLOCKS, VOCAB = 64, 128, 4, 2, 2, 8
HEAD_DIM = HIDDEN // HEADS
CHATML = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + "
          "'<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")
TOKENS = ["<unk>", "<|im_start|>", "<|im_end|>", "a", "b", "c", "d", "e"]
SHAPES = {"self_attn.q_proj": (HIDDEN, HIDDEN), "self_attn.k_proj": (KV_HEADS * HEAD_DIM, HIDDEN),
          "self_attn.v_proj": (KV_HEADS * HEAD_DIM, HIDDEN), "self_attn.o_proj": (HIDDEN, HIDDEN),
          "mlp.gate_proj": (FFN, HIDDEN), "mlp.up_proj": (FFN, HIDDEN), "mlp.down_proj": (HIDDEN, FFN)}
GGUF_NAMES = {"self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
              "self_attn.o_proj": "attn_output", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
              "mlp.down_proj": "ffn_down"}


def hf_weights(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {f"model.layers.{i}.{m}": rng.normal(0, 0.05, shape).astype(np.float32)
            for i in range(BLOCKS) for m, shape in SHAPES.items()}


def write_base(path: Path, weights: dict[str, np.ndarray], alignment: int | None = None) -> Path:
    """A tiny llama GGUF as convert_hf_to_gguf.py would write it: q/k rows permuted, linear weights
    Q8_0, norms and embeddings F32, ChatML template, CONTROL tokens; `alignment`: a `general.alignment`
    other than the default 32."""
    w = gguf.GGUFWriter(str(path), "llama")
    if alignment:
        w.add_custom_alignment(alignment)
    w.add_block_count(BLOCKS)
    w.add_embedding_length(HIDDEN)
    w.add_feed_forward_length(FFN)
    w.add_head_count(HEADS)
    w.add_head_count_kv(KV_HEADS)
    w.add_context_length(64)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_tokenizer_model("gpt2")
    w.add_token_list(TOKENS)
    normal, control = gguf.TokenType.NORMAL, gguf.TokenType.CONTROL
    w.add_token_types([normal, control, control] + [normal] * 5)
    w.add_eos_token_id(2)
    w.add_chat_template(CHATML)
    w.add_tensor("token_embd.weight", np.ones((VOCAB, HIDDEN), np.float32))
    for i in range(BLOCKS):
        w.add_tensor(f"blk.{i}.attn_norm.weight", np.ones(HIDDEN, np.float32))
        for m, name in GGUF_NAMES.items():
            value = weights[f"model.layers.{i}.{m}"]
            if name == "attn_q":
                value = llama_permute(value, HEADS)
            elif name == "attn_k":
                value = llama_permute(value, KV_HEADS)
            w.add_tensor(f"blk.{i}.{name}.weight", gguf.quants.quantize(value, gguf.GGMLQuantizationType.Q8_0),
                         raw_dtype=gguf.GGMLQuantizationType.Q8_0)
    w.add_tensor("output_norm.weight", np.ones(HIDDEN, np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def write_peft(folder: Path, *, rank: int = 4, alpha: float = 8.0, targets=tuple(SHAPES), seed: int = 1,
               dtype=np.float32, **config) -> Path:
    """A PEFT adapter folder as `save_pretrained` writes it (B non-zero, as after training)."""
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    tensors = {}
    for i in range(BLOCKS):
        for m in targets:
            out_dim, in_dim = SHAPES[m]
            r = config.get("rank_pattern", {}).get(m.rsplit(".", 1)[-1], rank)
            prefix = f"base_model.model.model.layers.{i}.{m}"
            tensors[prefix + ".lora_A.weight"] = rng.normal(0, 0.1, (r, in_dim)).astype(dtype)
            tensors[prefix + ".lora_B.weight"] = rng.normal(0, 0.01, (out_dim, r)).astype(dtype)
    save_file(tensors, str(folder / "adapter_model.safetensors"))
    cfg = {"peft_type": "LORA", "r": rank, "lora_alpha": alpha,
           "target_modules": [t.rsplit(".", 1)[-1] for t in targets], "bias": "none",
           "use_dora": False, "use_rslora": False, "alpha_pattern": {}, "rank_pattern": {},
           "modules_to_save": None, "fan_in_fan_out": False, **config}
    (folder / "adapter_config.json").write_text(json.dumps(cfg))
    return folder


@pytest.fixture
def base_path(tmp_path) -> Path:
    return write_base(tmp_path / "base.gguf", hf_weights())


def tensor(reader: gguf.GGUFReader, name: str):
    return next(t for t in reader.tensors if t.name == name)


def llama_cpp_scale(reader: gguf.GGUFReader, name: str) -> float:
    """`llama_adapter_lora_weight::get_scale(alpha, 1.0)`: alpha / rank with rank = lora_b ne[0]."""
    alpha = float(reader.get_field("adapter.lora.alpha").contents())
    rank = float(tensor(reader, name + ".lora_b").shape[0])
    return alpha / rank if alpha else 1.0


def test_adapter_gguf_keys_names_and_shapes_as_llama_cpp_checks(base_path, tmp_path):
    adapter = read_adapter(write_peft(tmp_path / "peft"))
    base = BaseGGUF.open(base_path)
    out = write_adapter_gguf(adapter, base, plan_tensors(adapter, base), tmp_path / "adapter.gguf")
    r = gguf.GGUFReader(out)
    assert r.get_field("general.type").contents() == "adapter"
    assert r.get_field("general.architecture").contents() == "llama"
    assert r.get_field("adapter.type").contents() == "lora"
    assert r.get_field("adapter.lora.alpha").types == [gguf.GGUFValueType.FLOAT32]
    names = {t.name for t in r.tensors}
    assert names == {f"blk.{i}.{n}.weight.lora_{ab}" for i in range(BLOCKS) for n in GGUF_NAMES.values() for ab in "ab"}
    for i in range(BLOCKS):
        for n in GGUF_NAMES.values():
            name = f"blk.{i}.{n}.weight"
            a, b, model = tensor(r, name + ".lora_a"), tensor(r, name + ".lora_b"), base.tensors[name]
            assert a.tensor_type == b.tensor_type == gguf.GGMLQuantizationType.F16
            # llama_adapter_lora_init_impl: model ne[0] == a ne[0], model ne[1] == b ne[1], a ne[1] == b ne[0]
            assert a.shape[0] == model.shape[0] and b.shape[1] == model.shape[1] and a.shape[1] == b.shape[0] == 4


@pytest.mark.parametrize("rslora", [False, True])
def test_llama_cpp_scale_times_b_a_is_the_peft_delta_in_gguf_row_order(base_path, tmp_path, rslora):
    adapter = read_adapter(write_peft(tmp_path / "peft", rank=4, alpha=8.0, use_rslora=rslora))
    base = BaseGGUF.open(base_path)
    r = gguf.GGUFReader(write_adapter_gguf(adapter, base, plan_tensors(adapter, base), tmp_path / "a.gguf"))
    assert float(r.get_field("adapter.lora.alpha").contents()) == pytest.approx(16.0 if rslora else 8.0)  # scale * r
    for m, n in GGUF_NAMES.items():
        module = adapter.modules[f"model.layers.1.{m}"]
        assert module.scale == pytest.approx(8.0 / math.sqrt(4) if rslora else 8.0 / 4)
        name = f"blk.1.{n}.weight"
        a = tensor(r, name + ".lora_a").data.astype(np.float32)
        b = tensor(r, name + ".lora_b").data.astype(np.float32)
        got = llama_cpp_scale(r, name) * (b @ a)
        want = module.delta()
        if n == "attn_q":
            want = llama_permute(want, HEADS)
        elif n == "attn_k":
            want = llama_permute(want, KV_HEADS)
        np.testing.assert_allclose(got, want, rtol=2e-3, atol=2e-5)  # f16 A and B


def test_rank_pattern_keeps_one_alpha_and_per_tensor_rank(base_path, tmp_path):
    adapter = read_adapter(write_peft(tmp_path / "peft", rank=4, alpha=8.0, rank_pattern={"v_proj": 2}))
    base = BaseGGUF.open(base_path)
    plan = plan_tensors(adapter, base)
    assert gguf_alpha(plan) == pytest.approx(8.0)
    r = gguf.GGUFReader(write_adapter_gguf(adapter, base, plan, tmp_path / "a.gguf"))
    assert llama_cpp_scale(r, "blk.0.attn_v.weight") == pytest.approx(4.0)
    assert llama_cpp_scale(r, "blk.0.attn_q.weight") == pytest.approx(2.0)
    rs = read_adapter(write_peft(tmp_path / "rs", rank=4, alpha=8.0, rank_pattern={"v_proj": 2}, use_rslora=True))
    with pytest.raises(ExportError, match="different adapter.lora.alpha"):
        gguf_alpha(plan_tensors(rs, base))


def rope(x: np.ndarray, pos: int, *, neox: bool) -> np.ndarray:
    """RoPE on one head's vector: NeoX/HF rotate_half pairs (i, i + d/2), or GGML's normal mode pairs
    (2i, 2i + 1), with the same frequencies per pair index i."""
    d = x.shape[0]
    theta = pos * 10000.0 ** (-np.arange(d // 2) * 2.0 / d)
    c, s = np.cos(theta), np.sin(theta)
    out = x.copy()
    lo, hi = (np.arange(d // 2), np.arange(d // 2) + d // 2) if neox else (np.arange(0, d, 2), np.arange(1, d, 2))
    out[lo], out[hi] = x[lo] * c - x[hi] * s, x[lo] * s + x[hi] * c
    return out


def test_permutation_makes_llama_cpp_rope_give_the_hf_attention_scores():
    rng = np.random.default_rng(3)
    wq, wk = rng.normal(size=(HIDDEN, HIDDEN)), rng.normal(size=(KV_HEADS * HEAD_DIM, HIDDEN))
    x1, x2 = rng.normal(size=HIDDEN), rng.normal(size=HIDDEN)

    def scores(q_w, k_w, neox):
        q, k = (q_w @ x1).reshape(HEADS, HEAD_DIM), (k_w @ x2).reshape(KV_HEADS, HEAD_DIM)
        return [float(rope(q[h], 5, neox=neox) @ rope(k[h // (HEADS // KV_HEADS)], 2, neox=neox)) for h in range(HEADS)]

    hf = scores(wq, wk, neox=True)
    np.testing.assert_allclose(scores(llama_permute(wq, HEADS), llama_permute(wk, KV_HEADS), neox=False), hf, rtol=1e-9)
    assert not np.allclose(scores(wq, wk, neox=False), hf)  # without the permutation llama.cpp's RoPE differs


@pytest.mark.parametrize("qtype,floor", [("F16", 0.98), ("Q8_0", 0.0), ("Q4_1", -1.0)])
def test_merged_file_adds_the_delta_and_copies_everything_else(base_path, tmp_path, qtype, floor):
    adapter = read_adapter(write_peft(tmp_path / "peft", targets=("self_attn.q_proj", "mlp.down_proj")))
    base = BaseGGUF.open(base_path)
    plan = plan_tensors(adapter, base)
    report = write_merged_gguf(base, plan, tmp_path / "m.gguf", qtype, "{{ 'T' }}")
    assert report.tensors_merged == 2 * BLOCKS and floor <= report.effect_kept <= 1.02
    merged = gguf.GGUFReader(report.path)
    src = {f.name: f.contents() for f in base.reader.fields.values() if not f.name.startswith("GGUF.")}
    dst = {f.name: f.contents() for f in merged.fields.values() if not f.name.startswith("GGUF.")}
    assert dst.pop("tokenizer.chat_template") == "{{ 'T' }}" and src.pop("tokenizer.chat_template") == CHATML
    assert dst == src
    assert [t.name for t in merged.tensors] == [t.name for t in base.reader.tensors]
    for t in merged.tensors:
        if t.name not in plan:
            old = base.tensors[t.name]
            assert t.tensor_type == old.tensor_type and bytes(t.data) == bytes(old.data)
    got = gguf.quants.dequantize(tensor(merged, "blk.0.attn_q.weight").data, gguf.GGMLQuantizationType[qtype])
    delta = adapter.modules["model.layers.0.self_attn.q_proj"].delta()
    want = base.dequantized("blk.0.attn_q.weight") + llama_permute(delta, HEADS)
    if qtype == "F16":
        np.testing.assert_allclose(got, want, atol=1e-4)
    assert tensor(merged, "blk.0.attn_q.weight").tensor_type == gguf.GGMLQuantizationType[qtype]


@pytest.mark.parametrize("alignment", [None, 64])
def test_merged_file_is_the_same_without_the_kernel_copy_and_keeps_the_alignment(tmp_path, monkeypatch, alignment):
    """Tensors without an adapter are copied file to file (os.copy_file_range); where the file system
    refuses that, the read/write loop writes the same bytes. A base with general.alignment 64 keeps it:
    every tensor starts on a multiple of it and reads back as the base's bytes."""
    base_path = write_base(tmp_path / "base.gguf", hf_weights(), alignment=alignment)
    base = BaseGGUF.open(base_path)
    plan = plan_tensors(read_adapter(write_peft(tmp_path / "peft", targets=("mlp.up_proj",))), base)
    kernel = write_merged_gguf(base, plan, tmp_path / "kernel.gguf", "Q8_0", None)

    def refuse(*args, **kwargs):
        raise OSError(errno.EXDEV, "Invalid cross-device link")

    monkeypatch.setattr(os, "copy_file_range", refuse)
    loop = write_merged_gguf(base, plan, tmp_path / "loop.gguf", "Q8_0", None)
    assert kernel.path.read_bytes() == loop.path.read_bytes()
    merged = gguf.GGUFReader(kernel.path)
    assert merged.alignment == (alignment or 32) and merged.data_offset % merged.alignment == 0
    copied = [t for t in merged.tensors if t.name not in plan]
    assert len(copied) == len(base.tensors) - BLOCKS
    for t in merged.tensors:
        assert (t.data_offset - merged.data_offset) % merged.alignment == 0
    for t in copied:
        assert bytes(t.data) == bytes(base.tensors[t.name].data), t.name


def test_f16_keeps_the_delta_with_less_error_than_q8_0_than_q4_1(base_path, tmp_path):
    adapter = read_adapter(write_peft(tmp_path / "peft"))
    base = BaseGGUF.open(base_path)
    plan = plan_tensors(adapter, base)
    reports = [write_merged_gguf(base, plan, tmp_path / f"{q}.gguf", q, None) for q in ("F16", "Q8_0", "Q4_1")]
    errors = [r.rel_error for r in reports]
    assert errors[0] < 0.05 and errors[0] < errors[1] < errors[2]
    assert reports[0].effect_kept == pytest.approx(1.0, abs=0.01)


CONFIG_REFUSALS = [
    ({"use_dora": True}, "DoRA"),
    ({"alpha_pattern": {"q_proj": 32}}, "alpha_pattern"),
    ({"modules_to_save": ["lm_head"]}, "modules_to_save"),
    ({"bias": "lora_only"}, "bias"),
    ({"fan_in_fan_out": True}, "fan_in_fan_out"),
    ({"lora_alpha": 0}, "lora_alpha must be > 0"),
    ({"target_modules": ["q_proj", "lm_head"]}, "ties its input embeddings"),
    ({"target_modules": ["embed_tokens"]}, "ties its input embeddings"),
    ({"peft_type": "IA3"}, "only LoRA"),
]


@pytest.mark.parametrize("change,needle", CONFIG_REFUSALS)
def test_refusals_say_what_the_format_cannot_hold(change, needle):
    config = {"peft_type": "LORA", "r": 8, "lora_alpha": 16, "target_modules": ["q_proj"], "bias": "none", **change}
    problems = refusals(config, ["adapter", "merged-f16"], tied_embeddings=True)
    assert len(problems) == 1 and needle in problems[0]


def test_lm_head_is_refused_only_when_tied_and_rslora_rank_pattern_only_for_the_adapter():
    config = {"r": 8, "lora_alpha": 16, "target_modules": ["lm_head"], "use_rslora": True,
              "rank_pattern": {"v_proj": 4}}
    assert refusals(config, ["merged-f16"], tied_embeddings=False) == []
    assert "rank_pattern" in refusals(config, ["adapter"], tied_embeddings=False)[0]


def test_unknown_or_empty_format_is_named():
    assert parse_formats(None) == ("adapter", "merged-f16", "merged-q8_0")
    assert parse_formats(["merged-q4_1", "adapter"]) == ("adapter", "merged-q4_1")
    with pytest.raises(ExportError, match="'safetensors'"):
        parse_formats(["adapter", "safetensors"])
    with pytest.raises(ExportError, match="at least one"):
        parse_formats([])


def test_wrong_base_and_stray_tensors_are_refused(base_path, tmp_path):
    base = BaseGGUF.open(base_path)
    folder = write_peft(tmp_path / "peft", targets=("self_attn.q_proj",))
    tensors = {"base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight": np.zeros((4, HIDDEN + 1), np.float32),
               "base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight": np.zeros((HIDDEN, 4), np.float32)}
    save_file(tensors, str(folder / "adapter_model.safetensors"))
    with pytest.raises(ExportError, match="wrong base model"):
        plan_tensors(read_adapter(folder), base)
    tensors = {"base_model.model.model.layers.0.self_attn.q_proj.lora_magnitude_vector": np.zeros(HIDDEN, np.float32)}
    save_file(tensors, str(folder / "adapter_model.safetensors"))
    with pytest.raises(ExportError, match="not a LoRA A or B"):
        read_adapter(folder)
    tensors = {"base_model.model.model.layers.7.self_attn.q_proj.lora_A.weight": np.zeros((4, HIDDEN), np.float32),
               "base_model.model.model.layers.7.self_attn.q_proj.lora_B.weight": np.zeros((HIDDEN, 4), np.float32)}
    save_file(tensors, str(folder / "adapter_model.safetensors"))
    with pytest.raises(ExportError, match="has no tensor in the base GGUF"):
        plan_tensors(read_adapter(folder), base)


def test_a_damaged_adapter_is_adapter_corrupt_and_named_without_its_path(tmp_path):
    """What cannot be read as a PEFT LoRA adapter is an `AdapterError` (code `adapter_corrupt`, the export's
    error code), named by file, never by path (the message reaches the user); what plain LoRA cannot hold
    stays `unsupported_export`."""
    from lcsb_core.errors import AdapterError

    folder = write_peft(tmp_path / "peft", targets=("self_attn.q_proj",))
    cases = [("adapter_model.safetensors", b"weights-step-2", "adapter_model.safetensors is not a readable"),
             ("adapter_config.json", b"{not json", "adapter_config.json is not valid JSON"),
             ("adapter_config.json", b"[1, 2]", "adapter_config.json is not a JSON object")]
    for name, body, message in cases:
        good = (folder / name).read_bytes()
        (folder / name).write_bytes(body)
        with pytest.raises(AdapterError, match=message) as caught:
            read_adapter(folder)
        assert caught.value.code == "adapter_corrupt" and str(tmp_path) not in str(caught.value)
        (folder / name).write_bytes(good)
    only_a = {"base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight": np.zeros((4, HIDDEN), np.float32)}
    save_file(only_a, str(folder / "adapter_model.safetensors"))
    with pytest.raises(AdapterError, match="has lora_A but not both A and B"):
        read_adapter(folder)
    (folder / "adapter_model.safetensors").unlink()
    with pytest.raises(AdapterError, match="^adapter_model.safetensors is missing"):
        read_adapter(folder)
    stray = {"base_model.model.model.layers.0.self_attn.q_proj.lora_magnitude_vector": np.zeros(HIDDEN, np.float32)}
    save_file(stray, str(folder / "adapter_model.safetensors"))
    with pytest.raises(ExportError) as caught:
        read_adapter(folder)
    assert caught.value.code == "unsupported_export"


def test_bf16_adapters_read_without_torch(tmp_path):
    import struct

    folder = write_peft(tmp_path / "peft", targets=("self_attn.q_proj",))
    values = np.array([[1.5, -2.0], [0.25, 3.0]], np.float32)
    payload = (values.view(np.uint32) >> 16).astype("<u2").tobytes()
    prefix = "base_model.model.model.layers.0.self_attn.q_proj"
    header = {f"{prefix}.lora_A.weight": {"dtype": "BF16", "shape": [2, 2], "data_offsets": [0, 8]},
              f"{prefix}.lora_B.weight": {"dtype": "BF16", "shape": [2, 2], "data_offsets": [8, 16]}}
    blob = json.dumps(header).encode()
    (folder / "adapter_model.safetensors").write_bytes(struct.pack("<Q", len(blob)) + blob + payload + payload)
    module = read_adapter(folder).modules["model.layers.0.self_attn.q_proj"]
    np.testing.assert_array_equal(module.a, values)


def test_ollama_template_renders_what_the_chat_template_renders():
    fmt = ollama_prompt_format(CHATML, ["<|im_start|>", "<|im_end|>"], eos="<|im_end|>")
    assert fmt.system is None and fmt.stop == ("<|im_end|>",)
    for system in (None, "Be brief."):
        messages = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": "Hi"}]
        assert render_go(fmt, "Hi", system) == render(CHATML, messages)
        later = [*messages, {"role": "assistant", "content": "Hello."}, {"role": "user", "content": "Bye"}]
        assert render_ollama(fmt, later) == render(CHATML, later)   # no empty system block before a later turn
    plain = ollama_prompt_format(PLAIN_TEMPLATE, ["<s>"], eos="</s>")
    assert plain.template == "{{ .Prompt }}" and plain.stop == ("</s>",)
    assert render(PLAIN_TEMPLATE, [{"role": "user", "content": "Question: 2+2?\nAnswer:"}]) == "Question: 2+2?\nAnswer:"


def test_a_prompt_completion_export_attaches_no_chat_template_it_never_trained_on(base_path, tmp_path):
    """The base GGUF carries ChatML; a prompt/completion job trained on the raw prompt, so its merged file's
    template, Modelfile and README give the prompt as it is, never a chat turn or a system prompt."""
    entry = dataclasses.replace(SMOLLM2, gguf_sha256=sha256_of(base_path), gguf_file="base.gguf")
    adapter = write_peft(tmp_path / "peft")
    template = training_template(None, "prompt_completion", gguf_template=CHATML, adapter_dir=adapter)
    export_adapter(adapter, tmp_path / "out", base_gguf=base_path, entry=entry, formats=["adapter", "merged-f16"],
                   chat_template=template, data_format="prompt_completion")
    merged = gguf.GGUFReader(tmp_path / "out" / "merged-f16.gguf")
    assert merged.get_field("tokenizer.chat_template").contents() == PLAIN_TEMPLATE
    assert json.loads((tmp_path / "out" / "manifest.json").read_text())["chat_template"] == PLAIN_TEMPLATE
    modelfile = (tmp_path / "out" / "Modelfile").read_text()
    assert 'TEMPLATE """{{ .Prompt }}"""' in modelfile and "SYSTEM" not in modelfile and "im_start" not in modelfile
    readme = (tmp_path / "out" / "README.md").read_text()
    assert " -cnv" not in readme and "-no-cnv" in readme and "without a chat template" in readme  # no chat mode


def test_export_folder_has_files_modelfile_readme_manifest(base_path, tmp_path):
    entry = dataclasses.replace(SMOLLM2, gguf_sha256=sha256_of(base_path), gguf_file="base.gguf")
    result = export_adapter(write_peft(tmp_path / "peft"), tmp_path / "out", base_gguf=base_path, entry=entry,
                            formats=None, chat_template=CHATML, data_format="chat", job_id="ftjob-x")
    names = sorted(p.name for p in (tmp_path / "out").iterdir())
    assert names == ["Modelfile", "README.md", "adapter.gguf", "manifest.json", "merged-f16.gguf", "merged-q8_0.gguf"]
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["base"]["gguf_sha256"] == entry.gguf_sha256 and manifest["lora"]["rank"] == 4
    assert manifest["lora"]["alpha"] == 8.0 and manifest["lora"]["targets"] == sorted(GGUF_NAMES_HF())
    assert manifest["adapter"]["sha256"] == sha256_of(tmp_path / "peft" / "adapter_model.safetensors")
    assert {f["format"]: f["effect_kept"] is None for f in manifest["files"]} == {
        "adapter": True, "merged-f16": False, "merged-q8_0": False}
    modelfile = (tmp_path / "out" / "Modelfile").read_text()
    assert modelfile.startswith("FROM ./merged-f16.gguf\nTEMPLATE \"\"\"")
    assert 'PARAMETER stop "<|im_end|>"' in modelfile
    assert manifest["base"]["gguf_command"] == "lcsb base-gguf SmolLM2-135M-Instruct"
    readme = (tmp_path / "out" / "README.md").read_text()
    assert f"`base.gguf` (SHA-256 `{entry.gguf_sha256}`)" in readme
    assert "`lcsb base-gguf SmolLM2-135M-Instruct` (this project's CLI, no torch needed) prints its path" in readme
    assert 'llama-cli -m "$(lcsb base-gguf SmolLM2-135M-Instruct)" --lora adapter.gguf' in readme
    assert result.files["adapter"] == tmp_path / "out" / "adapter.gguf"
    other = dataclasses.replace(entry, gguf_sha256="0" * 64)
    with pytest.raises(ExportError, match="not the catalog's"):
        export_adapter(tmp_path / "peft", tmp_path / "o2", base_gguf=base_path, entry=other, formats=None,
                       chat_template=CHATML, data_format="chat")


def GGUF_NAMES_HF() -> list[str]:
    return [m.rsplit(".", 1)[-1] for m in SHAPES]


def test_shipped_smollm2_gguf_holds_q_and_k_in_llama_cpp_row_order():
    """The real base: the imported safetensors (Hugging Face order, bf16) permuted equal the shipped
    Q4_1 GGUF's tensors de-quantized, to bf16 rounding; unpermuted they do not."""
    from safetensors import safe_open

    from lcsb_core.models.gguf_import import ensure_model, shipped_gguf_path

    base = BaseGGUF.open(shipped_gguf_path(SMOLLM2))
    assert (base.arch, base.n_head, base.n_head_kv, base.tied_embeddings) == ("llama", 9, 3, True)
    with safe_open(str(ensure_model(SMOLLM2.name) / "model.safetensors"), "pt") as f:
        for proj, heads in (("q_proj", 9), ("k_proj", 3), ("v_proj", None)):
            hf_name = f"model.layers.5.self_attn.{proj}"
            name = base.gguf_name(hf_name)
            assert name == f"blk.5.attn_{proj[0]}.weight"
            shipped = base.dequantized(name)
            hf = f.get_tensor(hf_name + ".weight").float().numpy()
            assert np.abs(base.to_gguf_rows(name, hf) - shipped).max() < 0.004  # bf16 rounding of the import
            if heads is not None:
                np.testing.assert_array_equal(base.to_gguf_rows(name, hf), llama_permute(hf, heads))
                assert np.abs(hf - shipped).max() > 0.5


def test_fast_header_parse_reads_what_the_stock_reader_reads(base_path):
    from lcsb_core.export.base import open_reader

    fast, stock = open_reader(base_path), gguf.GGUFReader(base_path)
    assert list(fast.fields) == list(stock.fields)
    for name, field in stock.fields.items():
        assert fast.fields[name].types == field.types and fast.fields[name].contents() == field.contents(), name
    assert [(t.name, t.tensor_type, bytes(t.data)) for t in fast.tensors] == [
        (t.name, t.tensor_type, bytes(t.data)) for t in stock.tensors]


def test_the_template_saved_beside_the_adapter_comes_first_for_a_chat_job(tmp_path):
    base_dir, adapter_dir = tmp_path / "base", tmp_path / "adapter"
    base_dir.mkdir()
    adapter_dir.mkdir()
    (base_dir / "chat_template.jinja").write_text("BASE {{ messages }}")
    assert training_template(base_dir, "chat", adapter_dir=adapter_dir) == "BASE {{ messages }}"  # none saved
    (adapter_dir / "chat_template.jinja").write_text("TRAINED {{ messages }}", encoding="utf-8")
    assert training_template(base_dir, "chat", adapter_dir=adapter_dir) == "TRAINED {{ messages }}"
    assert training_template(None, "chat", gguf_template="GGUF", adapter_dir=adapter_dir) == "TRAINED {{ messages }}"
    assert training_template(base_dir, "text", adapter_dir=adapter_dir) == PLAIN_TEMPLATE  # text jobs: no template
