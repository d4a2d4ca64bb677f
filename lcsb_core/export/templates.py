"""The chat template a job trained with, rendered as training rendered it, and the same prompt format
for Ollama (an explicit Go `TEMPLATE`, a `SYSTEM` line where the template injects one, and the stop
strings). Torch-free: jinja2 in the sandbox and with the options transformers' `apply_chat_template`
uses (`trim_blocks`, `lstrip_blocks`, `loopcontrols`, `raise_exception`).

    template = training_template(model_dir, "chat")       # the tokenizer's chat template
    render(template, [{"role": "user", "content": "Hi"}])  # what training fed the model for this prompt
    ollama = ollama_prompt_format(template, control_tokens, eos="<|im_end|>")
    render_ollama(ollama, messages)                        # what Ollama renders from it: the same text

One template source: training, graded evaluation and serving render the chat template saved beside the
adapter (the tokenizer's, `lcsb_core.chat_tokens`), the merged GGUF carries it, and the Modelfile's Go
TEMPLATE is derived from it and checked to render the same conversations (tests/core/test_one_template.py
renders multi-turn conversations through all of them on SmolLM2). The TEMPLATE's system block is guarded
by `{{ if .System }}`, as Ollama's own ChatML templates are: Ollama runs it once per turn with `.System`
empty after the first, and an unguarded block would put an empty system turn before every later user turn.

Chat jobs train on the base tokenizer's own template (`lcsb_core.data.tokenization`). Prompt/completion
and text jobs train on the raw prompt (after the tokenizer's BOS, which llama.cpp adds from
`tokenizer.ggml.add_bos_token` too), so their template is `PLAIN_TEMPLATE`: the messages' contents
concatenated, and Ollama's is `{{ .Prompt }}`.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from lcsb_core.data.formats import CHAT_TEMPLATE_FORMATS
from lcsb_core.errors import ExportError

PLAIN_TEMPLATE = "{% for message in messages %}{{ message['content'] }}{% endfor %}"
"""The template of prompt/completion and text jobs: the prompt as it is (training added only BOS)."""

_SYS, _USER, _RESP, _USER2 = "\x01SYSTEM\x01", "\x01PROMPT\x01", "\x01RESPONSE\x01", "\x01PROMPT2\x01"


def training_template(model_dir: Path | None, data_format: str, *, gguf_template: str | None = None,
                      adapter_dir: Path | None = None) -> str:
    """The chat template a job with data of `data_format` trained with: for `chat`, the one the trainer
    saved beside the adapter (`adapter_dir/chat_template.jinja`, `lcsb_core.training.checkpoint.CHAT_TEMPLATE_FILE`),
    else the base tokenizer's (`chat_template.jinja` or `tokenizer_config.json` in the imported model
    folder `model_dir`, else `gguf_template`: adapters trained before the trainer saved it); for
    `prompt_completion` and `text`, `PLAIN_TEMPLATE`. `preference` (DPO) data is rendered as chat: as `chat`.

    Raises:
        ExportError: a chat job whose base has no chat template, or an unknown format.
    """
    if data_format in ("prompt_completion", "text"):
        return PLAIN_TEMPLATE
    if data_format not in CHAT_TEMPLATE_FORMATS:
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
    """The Ollama form of `template`, found by rendering the template with placeholder messages (so any
    template that renders prefix by prefix works, as training requires); `PLAIN_TEMPLATE` gives
    `{{ .Prompt }}` (the raw prompt: no chat template is attached to a model that trained without one).

    Ollama runs a TEMPLATE without `.Messages` once per turn (`.System`, `.Prompt`, `.Response`), with
    `.System` empty after the first turn; the system block is guarded (`{{ if .System }}...{{ else }}` the
    user turn's opening `{{ end }}`) as Ollama's own ChatML templates guard it, so a later turn renders no
    empty system block. `system`: the default system prompt the template injects when a conversation
    has none (the Modelfile's SYSTEM, which Ollama prepends likewise). `stop`: the control token that
    closes an assistant turn in the template (from `control_tokens`, the GGUF's CONTROL tokens), then `eos`.
    The result is checked: `render_ollama` must render one- and two-turn conversations, with and without
    a system message, exactly as `render` renders `template`.

    Raises:
        ExportError: the template does not render a system and a user turn as prefix and suffix, opens
            a first user turn unlike later ones, or its Ollama form renders differently.
    """
    if template == PLAIN_TEMPLATE:
        return OllamaFormat("{{ .Prompt }}", None, (eos,))
    sys_msg, user = {"role": "system", "content": _SYS}, {"role": "user", "content": _USER}
    answer, user2 = {"role": "assistant", "content": _RESP}, {"role": "user", "content": _USER2}
    with_sys = render(template, [sys_msg, user])
    no_sys = render(template, [user])
    answered = render(template, [sys_msg, user, answer], add_generation_prompt=False)
    later = render(template, [user, answer, user2])
    if (with_sys.count(_SYS) != 1 or with_sys.count(_USER) != 1 or no_sys.count(_USER) != 1
            or later.count(_RESP) != 1 or later.count(_USER2) != 1):
        raise ExportError("the chat template does not render a system and a user message once each; "
                          "no Ollama TEMPLATE can be derived", field=None)
    pre_sys, rest = with_sys.split(_SYS)
    mid, post = rest.split(_USER)
    head = no_sys.split(_USER)[0]
    after = answered.split(_RESP)[-1] if answered.count(_RESP) == 1 else ""
    between = later.split(_RESP)[1].split(_USER2)[0]  # the answer's end, then the next user turn's opening
    user_open = between[len(after):] if between.startswith(after) else head
    system = None
    if head.startswith(pre_sys) and head.endswith(mid) and len(head) >= len(pre_sys) + len(mid):
        system = head[len(pre_sys):len(head) - len(mid)] or None
    go = (f"{{{{ if .System }}}}{_go_literal(pre_sys)}{{{{ .System }}}}{_go_literal(mid)}"
          f"{{{{ else }}}}{_go_literal(user_open)}{{{{ end }}}}"
          f"{{{{ .Prompt }}}}{_go_literal(post)}{{{{ .Response }}}}{_go_literal(after)}")
    stop = [t for t in sorted(control_tokens, key=len, reverse=True) if after.lstrip().startswith(t)][:1]
    fmt = OllamaFormat(go, system, tuple(dict.fromkeys([*stop, eos])))
    if system is None and head != user_open:
        raise ExportError("the chat template opens the first user turn of a conversation without a system "
                          "message unlike later ones; an Ollama TEMPLATE renders every turn alike", field=None)
    for messages in ([user], [sys_msg, user], [user, answer, user2], [sys_msg, user, answer, user2]):
        if render_ollama(fmt, messages) != render(template, messages):
            raise ExportError("the Ollama TEMPLATE derived from the chat template renders a conversation "
                              "differently from it; no Modelfile can be written for this template", field=None)
    return fmt


_ACTION = re.compile(r"\{\{(.*?)\}\}", re.DOTALL)


def _execute_go(template: str, values: dict[str, str]) -> str:
    """`template` executed as Go's text/template would, for the constructs `ollama_prompt_format` writes:
    `{{ .System }}`, `{{ .Prompt }}`, `{{ .Response }}` and `{{ if .X }}...{{ else }}...{{ end }}` (one
    level, a non-empty string is true). Anything else raises ValueError, so this interpretation never
    renders a construct it does not know."""
    out: list[str] = []
    branch: list[bool] = []  # per open `if`: whether the current arm is the one taken
    taking = True
    pos = 0
    for m in _ACTION.finditer(template):
        if taking:
            out.append(template[pos:m.start()])
        pos = m.end()
        action = m.group(1).strip()
        field = re.fullmatch(r"(if )?\.(System|Prompt|Response)", action)
        if field and field.group(1):
            if branch:
                raise ValueError("nested {{ if }} is not interpreted here")
            branch.append(bool(values[field.group(2)]))
            taking = branch[-1]
        elif field:
            if taking:
                out.append(values[field.group(2)])
        elif action == "else" and branch:
            taking = not branch[-1]
        elif action == "end" and branch:
            branch.pop()
            taking = True
        else:
            raise ValueError(f"Go template action {{{{ {action} }}}} is not interpreted here")
    if branch:
        raise ValueError("{{ if }} without {{ end }}")
    out.append(template[pos:])
    return "".join(out)


def render_ollama(fmt: OllamaFormat, messages: list[dict]) -> str:
    """The prompt Ollama's `/api/chat` builds from `messages` with the TEMPLATE `fmt.template` and SYSTEM
    `fmt.system`, ending where the model's answer starts. Ollama's rules for a TEMPLATE without
    `.Messages` (its server and `template.Execute`): the Modelfile's SYSTEM is prepended as a system
    message unless the first message is one; consecutive messages of one role are joined with a blank
    line; the template runs once per turn with `.System` (a system message since the last turn, else
    empty), `.Prompt` and `.Response`, each turn written when the next one starts; the last turn's
    template is cut at `{{ .Response }}`. The Go template is interpreted for the constructs
    `ollama_prompt_format` writes only (`_execute_go`); no Go template engine for Python is used (none
    is a maintained package). For tests and docs.

    Raises:
        ValueError: the template holds a construct this interpretation does not know.
    """
    msgs = [{"role": m["role"], "content": m["content"]} for m in messages]
    if fmt.system and (not msgs or msgs[0]["role"] != "system"):
        msgs.insert(0, {"role": "system", "content": fmt.system})
    collated: list[dict] = []
    for m in msgs:
        if collated and collated[-1]["role"] == m["role"]:
            collated[-1]["content"] += "\n\n" + m["content"]
        else:
            collated.append(dict(m))
    out: list[str] = []
    turn = {"System": "", "Prompt": "", "Response": ""}
    for m in collated:
        role = m["role"]
        if (role == "system" and (turn["Prompt"] or turn["Response"])) or (role == "user" and turn["Response"]):
            out.append(_execute_go(fmt.template, turn))
            turn = {"System": "", "Prompt": "", "Response": ""}
        key = {"system": "System", "user": "Prompt", "assistant": "Response"}.get(role)
        if key is not None:
            turn[key] = m["content"]
    out.append(_execute_go(fmt.template.split("{{ .Response }}")[0], turn))
    return "".join(out)


def render_go(fmt: OllamaFormat, prompt: str, system: str | None = None) -> str:
    """`fmt.template` for one turn with an empty response, as Ollama renders it (`.System` defaults to
    the Modelfile's SYSTEM): `render_ollama` of one user message, after `system` where given. For tests
    and docs."""
    head = [{"role": "system", "content": system}] if system is not None else []
    return render_ollama(fmt, [*head, {"role": "user", "content": prompt}])
