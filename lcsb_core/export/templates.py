"""The chat template a job trained with, rendered as training rendered it, and the same prompt format
for Ollama (an explicit Go `TEMPLATE`, a `SYSTEM` line where the template injects one, and the stop
strings). Torch-free: jinja2 in the sandbox and with the options transformers' `apply_chat_template`
uses (`trim_blocks`, `lstrip_blocks`, `loopcontrols`, `raise_exception`).

    template = training_template(model_dir, "chat")       # the tokenizer's chat template
    render(template, [{"role": "user", "content": "Hi"}])  # what training fed the model for this prompt
    ollama = ollama_prompt_format(template, control_tokens, eos="<|im_end|>")

Chat jobs train on the base tokenizer's own template (`lcsb_core.data.tokenization`). Prompt/completion
and text jobs train on the raw prompt (after the tokenizer's BOS, which llama.cpp adds from
`tokenizer.ggml.add_bos_token` too), so their template is `PLAIN_TEMPLATE`: the messages' contents
concatenated, and Ollama's is `{{ .Prompt }}`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from lcsb_core.errors import ExportError

PLAIN_TEMPLATE = "{% for message in messages %}{{ message['content'] }}{% endfor %}"
"""The template of prompt/completion and text jobs: the prompt as it is (training added only BOS)."""

_SYS, _USER, _RESP = "\x01SYSTEM\x01", "\x01PROMPT\x01", "\x01RESPONSE\x01"


def training_template(model_dir: Path | None, data_format: str, *, gguf_template: str | None = None,
                      adapter_dir: Path | None = None) -> str:
    """The chat template a job with data of `data_format` trained with: for `chat`, the one the trainer
    saved beside the adapter (`adapter_dir/chat_template.jinja`, `lcsb_core.checkpoint.CHAT_TEMPLATE_FILE`),
    else the base tokenizer's (`chat_template.jinja` or `tokenizer_config.json` in the imported model
    folder `model_dir`, else `gguf_template`: adapters trained before the trainer saved it); for
    `prompt_completion` and `text`, `PLAIN_TEMPLATE`.

    Raises:
        ExportError: a chat job whose base has no chat template, or an unknown format.
    """
    if data_format in ("prompt_completion", "text"):
        return PLAIN_TEMPLATE
    if data_format != "chat":
        raise ExportError(f"unknown training data format {data_format!r}", field=None)
    saved = Path(adapter_dir) / "chat_template.jinja" if adapter_dir is not None else None
    if saved is not None and saved.is_file():
        return saved.read_text(encoding="utf-8")
    if model_dir is not None:
        jinja = Path(model_dir) / "chat_template.jinja"
        if jinja.is_file():
            return jinja.read_text()
        config = Path(model_dir) / "tokenizer_config.json"
        if config.is_file():
            template = json.loads(config.read_text()).get("chat_template")
            if isinstance(template, str) and template:
                return template
    if gguf_template:
        return gguf_template
    raise ExportError("the base model has no chat template, so a chat job's prompt format is unknown", field=None)


def render(template: str, messages: list[dict], *, add_generation_prompt: bool = True,
           bos_token: str = "", eos_token: str = "") -> str:
    """`template` rendered as transformers' `apply_chat_template(messages, tokenize=False)` does.

    Raises:
        ExportError: the template refuses the conversation (its `raise_exception`).
    """
    from jinja2.ext import loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message: str) -> None:
        raise ExportError(f"the chat template refuses this conversation: {message}", field=None)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    env.globals["raise_exception"] = raise_exception
    return env.from_string(template).render(messages=messages, add_generation_prompt=add_generation_prompt,
                                            bos_token=bos_token, eos_token=eos_token)


@dataclass(frozen=True)
class OllamaFormat:
    """An Ollama Modelfile's prompt lines: `template` (Go template over `.System`, `.Prompt`,
    `.Response`), `system` (the default system prompt the chat template injects, or None) and `stop`
    (strings that end a turn)."""

    template: str
    system: str | None
    stop: tuple[str, ...]


def _go_literal(text: str) -> str:
    if "{{" in text or "}}" in text:
        raise ExportError("the chat template's literal text contains '{{' or '}}', which an Ollama TEMPLATE "
                          "cannot hold", field=None)
    return text


def ollama_prompt_format(template: str, control_tokens: list[str], *, eos: str) -> OllamaFormat:
    """The Ollama form of `template` for one system + prompt + response turn, found by rendering the
    template with placeholder messages (so any template that renders prefix by prefix works, as
    training requires); `PLAIN_TEMPLATE` gives `{{ .Prompt }}`. `stop`: the control token that closes
    an assistant turn in the template (from `control_tokens`, the GGUF's CONTROL tokens), then `eos`.

    Raises:
        ExportError: the template does not render a system and a user turn as prefix and suffix.
    """
    if template == PLAIN_TEMPLATE:
        return OllamaFormat("{{ .Prompt }}", None, (eos,))
    with_sys = render(template, [{"role": "system", "content": _SYS}, {"role": "user", "content": _USER}])
    no_sys = render(template, [{"role": "user", "content": _USER}])
    answered = render(template, [{"role": "system", "content": _SYS}, {"role": "user", "content": _USER},
                                 {"role": "assistant", "content": _RESP}], add_generation_prompt=False)
    if with_sys.count(_SYS) != 1 or with_sys.count(_USER) != 1 or no_sys.count(_USER) != 1:
        raise ExportError("the chat template does not render a system and a user message once each; "
                          "no Ollama TEMPLATE can be derived", field=None)
    pre_sys, rest = with_sys.split(_SYS)
    mid, post = rest.split(_USER)
    head = no_sys.split(_USER)[0]
    after = answered.split(_RESP)[-1] if answered.count(_RESP) == 1 else ""
    system = None
    if head.startswith(pre_sys) and head.endswith(mid) and len(head) >= len(pre_sys) + len(mid):
        system = head[len(pre_sys):len(head) - len(mid)] or None
    if system is not None:
        go = f"{_go_literal(pre_sys)}{{{{ .System }}}}{_go_literal(mid)}"
    else:
        go = (f"{{{{ if .System }}}}{_go_literal(pre_sys)}{{{{ .System }}}}{_go_literal(mid)}"
              f"{{{{ else }}}}{_go_literal(head)}{{{{ end }}}}")
    go += f"{{{{ .Prompt }}}}{_go_literal(post)}{{{{ .Response }}}}{_go_literal(after)}"
    stop = [t for t in sorted(control_tokens, key=len, reverse=True) if after.lstrip().startswith(t)][:1]
    return OllamaFormat(go, system, tuple(dict.fromkeys([*stop, eos])))


def render_go(fmt: OllamaFormat, prompt: str, system: str | None = None) -> str:
    """`fmt.template` for one turn with an empty response, as Ollama renders it (`.System` defaults to
    the Modelfile's SYSTEM); only the constructs `ollama_prompt_format` writes. For tests and docs."""
    text = fmt.template
    sys_text = system if system is not None else fmt.system
    if "{{ if .System }}" in text:
        head, rest = text.split("{{ if .System }}", 1)
        with_sys, rest = rest.split("{{ else }}", 1)
        without, rest = rest.split("{{ end }}", 1)
        text = head + (with_sys if sys_text else without) + rest
    text = text.replace("{{ .System }}", sys_text or "").replace("{{ .Prompt }}", prompt)
    return text.split("{{ .Response }}")[0]
