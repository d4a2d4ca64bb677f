"""Exports checked by their real consumer, llama.cpp (llama-cpp-python 0.3.36, built by scripts/setup.sh):
a real SmolLM2 chat job and a real Gemma-3-270M prompt/completion job, each trained for a few steps here
with the core trainer and exported with `lcsb export` (SmolLM2) and `export_run` (Gemma). llama.cpp
loads the shipped base GGUF plus `adapter.gguf` and each merged file; on 8 prompts x 32 greedy tokens of
the PEFT model its top-1 tokens agree on >= 95 % of positions for the adapter and F16, which keep >= 90 %
of the adapter's change of the log-probabilities (`lcsb_core.export.fidelity`); generation stops at each
model's end-of-turn token; the template inside the GGUF renders the prompt string training rendered.
The full 20 x 64 measurement is in BENCHMARKS.md ("GGUF export")."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lcsb_core.data import gsm8k_to_chat
from lcsb_core.models.catalog import GEMMA3_270M, SMOLLM2
from lcsb_core.training.config import TrainConfig

pytestmark = pytest.mark.integration
GSM8K = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "gsm8k"
PROMPTS, NEW_TOKENS = 8, 32


def gsm8k(split: str, start: int, count: int) -> list[dict]:
    src = GSM8K / f"{split}.jsonl"
    assert src.is_file(), f"GSM8K data missing at {src} (see ../shared/data/README.md)"
    return [json.loads(r) for r in src.read_text().splitlines()[start:start + count]]


def as_prompt_completion(row: dict) -> dict:
    return {"prompt": f"Question: {row['question']}\nAnswer:", "completion": " " + row["answer"]}


def train(tmp: Path, model: str, rows: list[dict]) -> Path:
    """A short real job (plain LoRA on every layer, fp32 base on CPU); returns its run folder."""
    from lcsb_core.training.trainer import Trainer

    (tmp / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    cfg = TrainConfig.from_dict({
        "data": {"train_file": str(tmp / "train.jsonl"), "max_seq_len": 128},
        "model": {"name_or_path": model, "quantization": "fp32", "device": "cpu"},
        "lora": {"rank": 8, "alpha": 16},
        "lcsb": {"schedule": "full"},
        "optim": {"learning_rate": 1e-3, "warmup_steps": 1, "lr_schedule": "constant"},
        "batch_size": 4, "max_steps": 6, "eval_every": 0, "seed": 0, "output_dir": str(tmp / "run"),
    })
    Trainer(cfg).train()
    return tmp / "run"


class Job:
    """One trained and exported job, with what the tests compare against."""

    def __init__(self, entry, run: Path, out: Path, base_gguf: Path, prompts: list[list[int]], tokenizer,
                 messages: list[list[dict]]):
        self.entry, self.run, self.out, self.base_gguf = entry, run, out, base_gguf
        self.prompts, self.tokenizer, self.messages = prompts, tokenizer, messages
        self.manifest = json.loads((out / "manifest.json").read_text())
        self._fidelity: dict | None = None

    @property
    def fidelity(self) -> dict:
        from lcsb_core.export.fidelity import measure
        from lcsb_core.models.gguf_import import ensure_model

        if self._fidelity is None:
            variants = {"adapter": (self.base_gguf, self.out / "adapter.gguf"),
                        "merged-f16": (self.out / "merged-f16.gguf", None),
                        "merged-q8_0": (self.out / "merged-q8_0.gguf", None)}
            self._fidelity = measure(ensure_model(self.entry.name), self.run / "adapter", self.prompts,
                                     new_tokens=NEW_TOKENS, variants=variants, base_gguf=self.base_gguf)
        return self._fidelity


@pytest.fixture(scope="module")
def smollm2(tmp_path_factory) -> Job:
    from typer.testing import CliRunner

    from lcsb_core.cli import app as core_cli
    from lcsb_core.models.gguf_import import ensure_model, shipped_gguf_path
    from lcsb_core.models.loading import load_tokenizer

    tmp = tmp_path_factory.mktemp("export-smollm2")
    run = train(tmp, SMOLLM2.name, [gsm8k_to_chat(r) for r in gsm8k("train", 0, 24)])
    result = CliRunner().invoke(core_cli, ["export", str(run), "-f", "adapter", "-f", "merged-f16", "-f", "merged-q8_0",
                                           "-f", "merged-q4_1", "--out", str(tmp / "export")])  # `lcsb export`
    assert result.exit_code == 0, result.output
    assert str(tmp / "export" / "merged-q4_1.gguf") in result.output
    tokenizer = load_tokenizer(ensure_model(SMOLLM2.name))
    messages = [[{"role": "user", "content": r["question"]}] for r in gsm8k("test", 0, PROMPTS)]
    prompts = [tokenizer(tokenizer.apply_chat_template(m, tokenize=False, add_generation_prompt=True),
                         add_special_tokens=False)["input_ids"] for m in messages]
    return Job(SMOLLM2, run, tmp / "export", shipped_gguf_path(SMOLLM2), prompts, tokenizer, messages)


@pytest.fixture(scope="module")
def gemma(tmp_path_factory) -> Job:
    from lcsb_core.export.run import export_run
    from lcsb_core.models.gguf_import import ensure_model, shipped_gguf_path
    from lcsb_core.models.loading import load_tokenizer

    tmp = tmp_path_factory.mktemp("export-gemma")
    run = train(tmp, GEMMA3_270M.name, [as_prompt_completion(r) for r in gsm8k("train", 0, 24)])
    export_run(run, tmp / "export")
    tokenizer = load_tokenizer(ensure_model(GEMMA3_270M.name))
    messages = [[{"role": "user", "content": as_prompt_completion(r)["prompt"]}] for r in gsm8k("test", 0, PROMPTS)]
    prompts = [[tokenizer.bos_token_id] + tokenizer(m[0]["content"], add_special_tokens=False)["input_ids"]
               for m in messages]
    return Job(GEMMA3_270M, run, tmp / "export", shipped_gguf_path(GEMMA3_270M, assemble_dir=tmp), prompts,
               tokenizer, messages)


@pytest.fixture(params=["smollm2", "gemma"])
def job(request) -> Job:
    return request.getfixturevalue(request.param)


def test_export_folder_and_manifest(job):
    m = job.manifest
    assert m["base"]["gguf_sha256"] == job.entry.gguf_sha256 and m["lora"]["rank"] == 8
    assert m["lora"]["alpha"] == 16 and m["lora"]["gguf_alpha"] == pytest.approx(16.0)
    assert m["data_format"] == ("chat" if job.entry is SMOLLM2 else "prompt_completion")
    files = {f["format"]: f for f in m["files"]}
    assert files["adapter"]["effect_kept"] is None and files["merged-f16"]["effect_kept"] > 0.95
    assert files["merged-f16"]["rel_error"] < files["merged-q8_0"]["rel_error"]
    assert (job.out / "Modelfile").read_text().startswith("FROM ./merged-f16.gguf\n")


def test_llama_cpp_loads_base_plus_adapter_and_each_merged_file(job):
    from lcsb_core.export.fidelity import open_llama

    files = [(job.base_gguf, job.out / "adapter.gguf")] + [
        (job.out / f["file"], None) for f in job.manifest["files"] if f["format"] != "adapter"]
    for gguf_path, lora in files:
        llm = open_llama(gguf_path, lora, n_ctx=64)
        assert llm.metadata["general.architecture"] == ("llama" if job.entry is SMOLLM2 else "gemma3")
        assert llm.n_vocab() == len(job.tokenizer)
        del llm


def test_greedy_tokens_agree_with_peft_and_keep_the_adapters_effect(job):
    fid = job.fidelity
    print(job.entry.name, {label: f.to_dict() for label, f in fid.items()})
    for label in ("adapter", "merged-f16"):
        assert fid[label].positions >= PROMPTS * 8
        assert fid[label].top1 >= 0.95, (label, fid[label].to_dict())
        assert 0.9 <= fid[label].effect_kept <= 1.1 and fid[label].rel_error < 0.5, (label, fid[label].to_dict())
    assert fid["merged-q8_0"].top1 >= 0.9, fid["merged-q8_0"].to_dict()


def test_generation_stops_at_the_end_of_turn_token(job):
    """llama.cpp treats each Modelfile stop string's token as end of generation, and the SmolLM2 chat
    job's merged model, asked a short question through the GGUF's own template, ends its answer with
    <|im_end|> (finish_reason "stop", not "length")."""
    import llama_cpp

    from lcsb_core.export.fidelity import open_llama

    llm = open_llama(job.out / "merged-f16.gguf", None, n_ctx=512)
    vocab = llama_cpp.llama_model_get_vocab(llm.model)
    for stop in job.manifest["stop"]:
        [token] = llm.tokenize(stop.encode(), add_bos=False, special=True)
        assert llama_cpp.llama_vocab_is_eog(vocab, token), stop
    assert job.manifest["stop"] == (["<|im_end|>"] if job.entry is SMOLLM2 else ["<eos>"])
    if job.entry is SMOLLM2:
        prompt = job.tokenizer.apply_chat_template([{"role": "user", "content": "Say hello in one short sentence."}],
                                                   tokenize=False, add_generation_prompt=True)
        out = llm.create_completion(prompt, max_tokens=128, temperature=0.0)
        assert out["choices"][0]["finish_reason"] == "stop", out
        assert out["usage"]["completion_tokens"] < 128 and "<|im_end|>" not in out["choices"][0]["text"]


def test_template_inside_the_gguf_renders_the_training_prompt(job):
    """llama-cpp-python's Jinja2 chat formatter over the merged file's `tokenizer.chat_template` renders
    what training rendered, and llama.cpp tokenizes it (adding BOS as the GGUF says) to the training ids."""
    from llama_cpp.llama_chat_format import Jinja2ChatFormatter

    from lcsb_core.export.fidelity import open_llama

    llm = open_llama(job.out / "merged-q8_0.gguf", None, n_ctx=64)
    formatter = Jinja2ChatFormatter(template=llm.metadata["tokenizer.chat_template"], eos_token="", bos_token="")
    add_bos = llm.metadata.get("tokenizer.ggml.add_bos_token") == "true"
    for messages, prompt_ids in zip(job.messages, job.prompts, strict=True):
        rendered = formatter(messages=messages).prompt
        if job.entry is SMOLLM2:
            assert rendered == job.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        else:
            assert rendered == messages[0]["content"]
        assert llm.tokenize(rendered.encode(), add_bos=add_bos, special=True) == prompt_ids


def test_a_downloaded_folder_and_a_bare_adapter_export_as_their_run_does(smollm2, tmp_path):
    """What `lcsb jobs download` writes (adapter/ and a config.json whose training file is not on this
    machine) and a bare adapter folder export without flags: a chat job's adapter carries its chat
    template, so the data format is known; the adapter.gguf is the run's, byte for byte. A folder that is
    neither, or a checkpoint asked of an adapter folder, is a clear error (exit 2, no traceback)."""
    import shutil

    from typer.testing import CliRunner

    from lcsb_core.cli import app as core_cli

    download = tmp_path / "download"
    shutil.copytree(smollm2.run / "adapter", download / "adapter")
    config = json.loads((smollm2.run / "config.json").read_text())
    config["data"]["train_file"] = "train.jsonl"   # as published: no worker path
    (download / "config.json").write_text(json.dumps(config))
    runner = CliRunner()
    for folder in (download, download / "adapter"):
        out = tmp_path / f"export-{folder.name}"
        result = runner.invoke(core_cli, ["export", str(folder), "-f", "adapter", "--out", str(out)])
        assert result.exit_code == 0, result.output
        assert (out / "adapter.gguf").read_bytes() == (smollm2.out / "adapter.gguf").read_bytes()
        assert json.loads((out / "manifest.json").read_text())["data_format"] == "chat"
    (tmp_path / "empty").mkdir()
    for args, needle in ((["export", str(tmp_path / "empty")], "not a run folder"),
                         (["export", str(download / "adapter"), "--checkpoint", "4"], "without checkpoints")):
        result = runner.invoke(core_cli, args)
        assert result.exit_code == 2 and needle in " ".join(result.output.split()), result.output
        assert result.exception is None or isinstance(result.exception, SystemExit)
