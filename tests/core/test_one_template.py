"""One template, four renderers (issue 48): for the same messages, training (`ExampleEncoder`: the ids
before the answer it learns), graded evaluation (`EvalSample.prompt_ids`), serving (`Prompting.chat_prompt`
with the template saved beside the adapter) and export (the template `training_template` puts in the
merged GGUF, rendered by the export's Jinja, by llama-cpp-python's chat formatter, and the Modelfile's Go
TEMPLATE as Ollama runs it) make the same prompt, on the real SmolLM2-135M-Instruct tokenizer and
multi-turn conversations with and without a system message (handwritten and HH-RLHF's).

The Ollama TEMPLATE is rendered by `export.templates.render_ollama`: Ollama's turn loop for a TEMPLATE
without `.Messages` and the four Go template constructs the exporter writes, interpreted here (no Go
template engine for Python is a maintained package; its interpretation refuses any other construct).

A prompt/completion job trains on the raw prompt (after the tokenizer's BOS, where it adds one): every
renderer gives exactly that prompt, on SmolLM2 (no BOS) and Gemma-3-270M (`<bos>`), and its export
attaches no chat template it never trained on."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lcsb_core.data import ExampleEncoder, parse_record
from lcsb_core.data.tokenization import IGNORE_INDEX
from lcsb_core.eval.samples import sample_of
from lcsb_core.export.templates import (
    PLAIN_TEMPLATE,
    ollama_prompt_format,
    render,
    render_ollama,
    training_template,
)
from lcsb_core.inference import Prompting
from lcsb_core.training.checkpoint import CHAT_TEMPLATE_FILE

SHARED_DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data"
SYSTEM = {"role": "system", "content": "You answer in one short sentence."}
TURNS = [{"role": "user", "content": "What is 2+2?"}, {"role": "assistant", "content": "4."},
         {"role": "user", "content": "And 3+3?\nShow the sum."}, {"role": "assistant", "content": "3+3 = 6."},
         {"role": "user", "content": "  Thanks!  "}, {"role": "assistant", "content": "You're welcome."}]


def _tokenizer(name: str):
    from lcsb_core.models.gguf_import import ensure_model
    from lcsb_core.models.loading import load_tokenizer

    return load_tokenizer(ensure_model(name))


@pytest.fixture(scope="module")
def smol():
    return _tokenizer("SmolLM2-135M-Instruct")


class _Serving(Prompting):
    """The serving engines' shared prompt code (`Prompting`) on a tokenizer, without loading weights."""

    def __init__(self, tokenizer) -> None:
        self.tokenizer = tokenizer
        self.end_token_ids = frozenset({tokenizer.eos_token_id})


def _conversations() -> list[list[dict]]:
    """Handwritten multi-turn chats with and without a system message, and multi-turn HH-RLHF ones."""
    path = SHARED_DATA / "hh-rlhf-harmless" / "validation.jsonl"
    if not path.is_file():
        pytest.fail(f"reference data {path} is missing (../shared/data next to the repository)", pytrace=False)
    hh = []
    with path.open() as f:
        for line in f:
            row = json.loads(line)
            conv = row["input"]["messages"] + row["preferred_output"]
            if len(conv) >= 4:
                hh.append(conv)
            if len(hh) == 4:
                break
    return [TURNS, [SYSTEM, *TURNS], hh[0], hh[1], [SYSTEM, *hh[2]], [SYSTEM, *hh[3]]]


def _prompt_of_training(tokenizer, line: dict) -> list[int]:
    """The ids training reads before the last answer it learns (the last run of target labels)."""
    [(ids, labels)] = ExampleEncoder(tokenizer).encode([parse_record(json.dumps(line))])
    start = max(i for i, x in enumerate(labels) if x != IGNORE_INDEX and labels[i - 1] == IGNORE_INDEX)
    return ids[:start]


def test_training_eval_serving_and_export_render_one_chat_prompt(smol, tmp_path):
    from llama_cpp.llama_chat_format import Jinja2ChatFormatter

    from lcsb_core.models.gguf_import import ensure_model

    adapter = tmp_path / "adapter"   # what the trainer saves beside a chat job's adapter (`save_adapter`)
    adapter.mkdir()
    (adapter / CHAT_TEMPLATE_FILE).write_text(smol.chat_template, encoding="utf-8")
    serving = _Serving(smol)
    exported = training_template(ensure_model("SmolLM2-135M-Instruct"), "chat", adapter_dir=adapter)
    ollama = ollama_prompt_format(exported, smol.all_special_tokens, eos=smol.eos_token)
    assert "{{ if .System }}" in ollama.template and ollama.system  # guarded; SmolLM2's default system prompt
    gguf = Jinja2ChatFormatter(template=exported, eos_token="", bos_token="")   # llama.cpp's chat formatter
    checked = 0
    for conv in _conversations():
        for k, message in enumerate(conv):
            if message["role"] != "assistant":
                continue
            line, prompt = {"messages": conv[:k + 1]}, conv[:k]
            trained = _prompt_of_training(smol, line)
            text = render(exported, prompt)   # the export's template, as the merged GGUF carries it
            assert render_ollama(ollama, prompt) == text, (conv, k)
            assert gguf(messages=prompt).prompt == text
            assert smol.decode(trained, skip_special_tokens=False, clean_up_tokenization_spaces=False) == text
            assert sample_of(parse_record(json.dumps(line)), 1).prompt_ids(smol) == trained
            assert serving.chat_prompt(prompt, serving.template_of(adapter)) == trained
            assert smol(text, add_special_tokens=False)["input_ids"] == trained   # the runtimes tokenize the text
            checked += 1
    assert checked >= 14
    # later turns: the system block appears once, as the chat template renders it (not empty before each turn)
    text = render_ollama(ollama, TURNS[:5])
    assert text.count("<|im_start|>system\n") == 1 and "<|im_start|>system\n<|im_end|>" not in text


@pytest.mark.parametrize("name", ["SmolLM2-135M-Instruct", "gemma-3-270m"])
def test_a_prompt_completion_model_gets_the_raw_prompt_it_trained_on_everywhere(name, tmp_path):
    from lcsb_core.models.gguf_import import ensure_model

    tokenizer = _tokenizer(name)
    adapter = tmp_path / "adapter"   # a chat template beside it must not matter: the job trained without one
    adapter.mkdir()
    (adapter / CHAT_TEMPLATE_FILE).write_text("{{ 'CHAT' }}", encoding="utf-8")
    template = training_template(ensure_model(name), "prompt_completion", adapter_dir=adapter)
    assert template == PLAIN_TEMPLATE
    ollama = ollama_prompt_format(template, [], eos="</s>")
    assert ollama.template == "{{ .Prompt }}" and ollama.system is None
    serving = _Serving(tokenizer)
    for prompt in ("Question: What is 2+2?\nAnswer:", "Translate to French: cheese =>", "  leading spaces and a tab\t"):
        line = {"prompt": prompt, "completion": " 4"}
        [(ids, labels)] = ExampleEncoder(tokenizer).encode([parse_record(json.dumps(line))])
        trained = ids[:next(i for i, x in enumerate(labels) if x != IGNORE_INDEX)]
        assert serving.text_prompt(prompt) == trained                      # /v1/completions
        assert sample_of(parse_record(json.dumps(line)), 1).prompt_ids(tokenizer) == trained
        assert render(template, [{"role": "user", "content": prompt}]) == prompt   # the merged GGUF's template
        assert render_ollama(ollama, [{"role": "user", "content": prompt}]) == prompt
        assert tokenizer(prompt)["input_ids"] == trained
