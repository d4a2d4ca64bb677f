"""The preference (DPO) format, OpenAI's shape: `{"input": {"messages": [...]}, "preferred_output": [...],
"non_preferred_output": [...]}`. Each malformed line names its line and field; the real hh-rlhf pairs
validate; with SmolLM2's tokenizer a pair becomes two interleaved sides whose targets are the answer only,
and a side longer than max_seq_len is an error naming the line and the side."""

from __future__ import annotations

import copy
import json

import pytest

from lcsb_core.data import ValidationLimits, build_dataset, check_tokenizer, sniff_format, validate_file
from lcsb_core.data.formats import (
    NO_TOOLS,
    PREFERENCE,
    Message,
    RecordError,
    parse_record,
    preference_sides,
)
from lcsb_core.data.tokenization import IGNORE_INDEX
from lcsb_core.errors import DataError

SMALL = ValidationLimits(min_examples=1)
IM_END = "<|im_end|>"


def u(content="Is the sea salty?", **kw):
    return {"role": "user", "content": content, **kw}


def a(content="Yes, it is salty.", **kw):
    return {"role": "assistant", "content": content, **kw}


def pair(messages=None, preferred=None, non_preferred=None, **top):
    """A preference line; `preferred` / `non_preferred` are the output lists."""
    return {"input": {"messages": messages if messages is not None else [u()]},
            "preferred_output": preferred if preferred is not None else [a("Yes: about 3.5 % salt.")],
            "non_preferred_output": non_preferred if non_preferred is not None else [a("No.")], **top}


def _write(path, rows):
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def _supervised(ids, labels):
    return [i for i, lab in zip(ids, labels, strict=True) if lab != IGNORE_INDEX]


def _decode(tok, ids):
    return tok.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)


# -- parsing ----------------------------------------------------------------------------------------------

def test_a_pair_parses_into_input_and_two_answers():
    line = pair([{"role": "system", "content": "Be kind."}, u("hi"), a("hello"), u("Is the sea salty?")],
                [a("Yes.")], [a("No.")])
    ex = parse_record(json.dumps(line))
    assert ex.format == PREFERENCE == "preference"
    assert ex.messages == (Message("system", "Be kind."), Message("user", "hi"), Message("assistant", "hello"),
                           Message("user", "Is the sea salty?"))
    assert (ex.preferred, ex.non_preferred) == (Message("assistant", "Yes."), Message("assistant", "No."))
    assert ex.ignored == () and ex.prompt == ex.completion == ex.text == ""
    assert ex.strings() == ["Be kind.", "hi", "hello", "Is the sea salty?", "Yes.", "No."]


def test_openai_documented_shape_carries_nothing_ignored():
    """OpenAI's preference example carries `"tools": [], "parallel_tool_calls": true` in `input`: without
    tools the switch means nothing, so it is neither rejected nor warned."""
    for switch in (True, False, None):
        line = pair()
        line["input"].update(tools=[], parallel_tool_calls=switch)
        assert parse_record(json.dumps(line)).ignored == ()


def test_an_assistant_may_speak_twice_in_the_input():
    """Real transcripts (hh-rlhf train lines 1057 and 1310) hold two assistant turns in a row: context only."""
    ex = parse_record(json.dumps(pair([u("hi"), a("one"), a("two"), u("go on")])))
    assert [m.role for m in ex.messages] == ["user", "assistant", "assistant", "user"]


def test_detection_and_the_no_format_message():
    with pytest.raises(RecordError) as exc:
        parse_record(json.dumps({"instruction": "add", "input": "2 and 2", "output": "4"}))  # Alpaca: not preference
    assert exc.value.field is None and "no known format" in exc.value.message
    assert '"input", "preferred_output" and "non_preferred_output" (preference)' in exc.value.message
    assert "found keys: input, instruction, output" in exc.value.message
    # a string `input` beside prompt/completion stays an ignored key, as before
    pc = parse_record(json.dumps({"prompt": "p", "completion": "c", "input": "x"}))
    assert pc.format == "prompt_completion" and pc.ignored == ("input",)
    # an object `input` alone is a preference line missing its outputs
    with pytest.raises(RecordError) as exc:
        parse_record(json.dumps({"input": {"messages": [u()]}}))
    assert exc.value.field == "preferred_output" and "is missing" in exc.value.message


def test_digest_is_the_pair_content():
    one = parse_record(json.dumps(pair(id="a")))
    assert one.digest() == parse_record(json.dumps(pair())).digest()
    assert one.digest() != parse_record(json.dumps(pair(non_preferred=[a("Nope.")]))).digest()
    swapped = pair(preferred=[a("No.")], non_preferred=[a("Yes: about 3.5 % salt.")])
    assert one.digest() != parse_record(json.dumps(swapped)).digest()


# -- malformed lines: line 2 of three, each names its field -------------------------------------------------

def _without(obj, *path):
    obj = copy.deepcopy(obj)
    target = obj
    for key in path[:-1]:
        target = target[key]
    del target[path[-1]]
    return obj


CALL = [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]
MALFORMED = [
    pytest.param(_without(pair(), "input"), "input", "is missing", id="input-missing"),
    pytest.param({**pair(), "input": "Is the sea salty?"}, "input", "expected an object with messages, found string",
                 id="input-string"),
    pytest.param({**pair(), "input": [u()]}, "input", "expected an object with messages, found array",
                 id="input-array"),
    pytest.param(_without(pair(), "input", "messages"), "input.messages", "is missing", id="messages-missing"),
    pytest.param({**pair(), "input": {"messages": "hi"}}, "input.messages",
                 "expected a list of messages, found string", id="messages-not-list"),
    pytest.param(pair([]), "input.messages", "is empty", id="messages-empty"),
    pytest.param(pair([a(), u()]), "input.messages[0].role", "the first message must be from the user, found "
                 "assistant", id="starts-with-assistant"),
    pytest.param(pair([{"role": "system", "content": "s"}, a(), u()]), "input.messages[1].role",
                 "the first message after the system message must be from the user", id="system-then-assistant"),
    pytest.param(pair([u(), {"role": "system", "content": "s"}, u()]), "input.messages[1].role",
                 "a system message is only allowed first", id="system-not-first"),
    pytest.param(pair([u("a"), u("b")]), "input.messages[1].role", "expected assistant after user, found user",
                 id="two-users"),
    pytest.param(pair([u(), a(), {"role": "bot", "content": "x"}]), "input.messages[2].role",
                 "unknown role 'bot'", id="unknown-role"),
    pytest.param(pair([u(), {"role": "tool", "content": "21 C"}, u()]), "input.messages[1].role",
                 "role 'tool': tool calling", id="tool-role"),
    pytest.param(pair([u(), a(None, tool_calls=CALL), u()]), "input.messages[1].tool_calls", NO_TOOLS,
                 id="input-tool_calls"),
    pytest.param(pair([u(), {"role": "assistant"}, u()]), "input.messages[1].content", "is missing",
                 id="input-content-missing"),
    pytest.param(pair([u([{"type": "text", "text": "hi"}])]), "input.messages[0].content",
                 "content parts (a list) are not supported", id="input-content-parts"),
    pytest.param(pair([u(), a("hello", weight=0), u()]), "input.messages[1].weight",
                 "is not used in preference data", id="input-weight"),
    pytest.param(pair([u(), a()]), "input.messages[1].role", "the input must end with a user message "
                 "(preferred_output and non_preferred_output answer it), found assistant", id="input-ends-assistant"),
    pytest.param(pair([{"role": "system", "content": "s"}]), "input.messages[0].role",
                 "must end with a user message", id="input-only-system"),
    pytest.param({**pair(), "input": {"messages": [u()], "tools": [{"type": "function"}]}}, "input.tools",
                 NO_TOOLS, id="input-tools"),
    pytest.param(pair(tools=[{"type": "function"}]), "tools", NO_TOOLS, id="top-level-tools"),
    pytest.param(_without(pair(), "preferred_output"), "preferred_output", "is missing", id="preferred-missing"),
    pytest.param(_without(pair(), "non_preferred_output"), "non_preferred_output", "is missing",
                 id="non-preferred-missing"),
    pytest.param(pair(preferred=a()), "preferred_output", "expected a list with one assistant message, found object",
                 id="preferred-object"),
    pytest.param({**pair(), "non_preferred_output": "No."}, "non_preferred_output",
                 "expected a list with one assistant message, found string", id="non-preferred-string"),
    pytest.param(pair(preferred=[]), "preferred_output", "is empty", id="preferred-empty"),
    pytest.param(pair(non_preferred=[a("No."), a("Really no.")]), "non_preferred_output",
                 "holds 2 messages; give exactly one assistant message", id="two-messages"),
    pytest.param(pair(preferred=[u("Yes.")]), "preferred_output[0].role", "expected assistant, found user",
                 id="preferred-role-user"),
    pytest.param(pair(non_preferred=[{"role": "system", "content": "No."}]), "non_preferred_output[0].role",
                 "expected assistant, found system", id="non-preferred-role-system"),
    pytest.param(pair(non_preferred=[{"role": "tool", "content": "No."}]), "non_preferred_output[0].role",
                 "role 'tool': tool calling", id="output-role-tool"),
    pytest.param(pair(preferred=[a("")]), "preferred_output[0].content", "is empty", id="preferred-content-empty"),
    pytest.param(pair(non_preferred=[a(" \n\t")]), "non_preferred_output[0].content", "is empty",
                 id="non-preferred-content-blank"),
    pytest.param(pair(preferred=[a(None)]), "preferred_output[0].content", "expected a string, found null",
                 id="preferred-content-null"),
    pytest.param(pair(preferred=[a([{"type": "text", "text": "Yes"}])]), "preferred_output[0].content",
                 "content parts (a list) are not supported", id="output-content-parts"),
    pytest.param(pair(preferred=[a(None, refusal="I can't.")]), "preferred_output[0].refusal",
                 "put the refusal text in content", id="output-refusal"),
    pytest.param(pair(non_preferred=[a(None, audio={"id": "x"})]), "non_preferred_output[0].audio",
                 "audio is not supported", id="output-audio"),
    pytest.param(pair(preferred=[a("Yes.", tool_calls=CALL)]), "preferred_output[0].tool_calls", NO_TOOLS,
                 id="output-tool_calls"),
    pytest.param(pair(preferred=[a("Yes.", weight=1)]), "preferred_output[0].weight",
                 "is not used in preference data", id="preferred-weight"),
    pytest.param(pair(non_preferred=[a("No.", weight=0)]), "non_preferred_output[0].weight",
                 "is not used in preference data", id="non-preferred-weight"),
    pytest.param(pair(preferred=[a("Same.")], non_preferred=[a("Same.")]), "non_preferred_output[0].content",
                 "is the same as preferred_output[0].content", id="equal-outputs"),
    pytest.param({**pair(), "messages": [u(), a()]}, None, "keys of several formats on one line (chat, preference)",
                 id="chat-and-preference-keys"),
    pytest.param({**pair(), "prompt": "p"}, None, "keys of several formats on one line (prompt_completion, "
                 "preference)", id="prompt-and-preference-keys"),
]


@pytest.mark.parametrize("line, field, fragment", MALFORMED)
def test_malformed_line_names_line_and_field(tmp_path, line, field, fragment):
    rows = [pair(), line, pair(non_preferred=[a("Maybe.")])]
    report = validate_file(_write(tmp_path / "p.jsonl", rows), limits=SMALL)
    assert not report.ok and report.format == "preference"
    assert (report.valid_examples, report.invalid_examples) == (2, 1)
    [err] = report.errors
    assert (err.line, err.field) == (2, field)
    assert fragment in err.message
    assert f"line 2{', field ' + field if field else ''}: " in report.summary()


def test_one_error_per_line_the_first_found(tmp_path):
    # input ends with assistant, and the outputs are missing and equal: the input is reported
    rows = [pair(), {"input": {"messages": [u(), a()]}}, pair([u(), u()], [a("")], [a("")])]
    report = validate_file(_write(tmp_path / "p.jsonl", rows), limits=SMALL)
    assert [(e.line, e.field) for e in report.errors] == [(2, "input.messages[1].role"),
                                                         (3, "input.messages[1].role")]


def test_mixing_preference_and_chat_lines_is_an_error(tmp_path):
    rows = [pair(), {"messages": [u(), a()]}, pair(non_preferred=[a("Maybe.")]), {"prompt": "p", "completion": "c"}]
    report = validate_file(_write(tmp_path / "p.jsonl", rows), limits=SMALL)
    assert (report.format, report.format_line) == ("preference", 1)
    assert [(e.line, e.field, e.message) for e in report.errors] == [
        (2, None, "this line is in chat format but the file is in preference format (detected from line 1); "
                  "use one format per file"),
        (4, None, "this line is in prompt_completion format but the file is in preference format (detected from "
                  "line 1); use one format per file"),
    ]
    chat_first = validate_file(_write(tmp_path / "c.jsonl", [{"messages": [u(), a()]}, pair()]), limits=SMALL)
    assert chat_first.format == "chat" and [(e.line, e.field) for e in chat_first.errors] == [(2, None)]
    assert "this line is in preference format but the file is in chat format" in chat_first.errors[0].message


def test_ignored_keys_are_warned_with_lines(tmp_path):
    noisy = pair([u("hi", name="ann")], [a("Yes.", name="bot")], id="x1")
    noisy["input"]["metadata"] = {"src": "x"}
    rows = [pair(), noisy, pair(non_preferred=[a("Maybe.")]), noisy]
    report = validate_file(_write(tmp_path / "p.jsonl", rows), limits=SMALL)
    assert report.ok and report.valid_examples == 4
    lines = {"count": 2, "lines": [2, 4]}
    assert report.ignored_keys == {"id": lines, "input.messages[].name": lines, "input.metadata": lines,
                                   "preferred_output[].name": lines}
    warned = {w.split(" ")[0]: w for w in report.warnings if " is ignored on " in w}
    assert "training reads only input, preferred_output and non_preferred_output in the preference format" in warned[
        "id"]
    assert "training reads only a message's role and content" in warned["preferred_output[].name"]
    assert "training reads only input.messages of the input" in warned["input.metadata"]


def test_duplicate_pairs_and_overlap_use_the_digest(tmp_path):
    train = _write(tmp_path / "train.jsonl", [pair(), pair(non_preferred=[a("Maybe.")]), pair(id="copy")])
    report = validate_file(train, limits=SMALL)
    assert report.ok and report.duplicates == 1 and report.duplicate_lines == [(3, 1)]
    val = _write(tmp_path / "val.jsonl", [pair(non_preferred=[a("Perhaps.")]), pair(non_preferred=[a("Maybe.")])])
    report = validate_file(val, limits=SMALL, reference_path=train)
    assert report.reference_overlap == 1 and report.overlap_lines == [2]


# -- the real data: Anthropic hh-rlhf harmless-base, converted -------------------------------------------

@pytest.mark.parametrize("split, pairs", [("train", 2103), ("validation", 200)])
def test_hh_rlhf_pairs_validate_cleanly(shared_data, split, pairs):
    path = shared_data(f"hh-rlhf-harmless/{split}.jsonl")
    report = validate_file(path)
    assert report.ok and report.errors == [] and report.file_errors == []
    assert (report.format, report.format_line) == ("preference", 1)
    assert (report.num_examples, report.valid_examples, report.invalid_examples) == (pairs, pairs, 0)
    assert report.duplicates == 0 and report.ignored_keys == {} and report.warnings == []
    assert sniff_format(path) == "preference"


def test_hh_rlhf_validation_tokenized(shared_data, tokenizer):
    path = shared_data("hh-rlhf-harmless/validation.jsonl")
    report = validate_file(path, tokenizer=tokenizer, max_seq_len=2048,
                           reference_path=shared_data("hh-rlhf-harmless/train.jsonl"))
    assert report.ok and report.format == "preference" and report.usable_examples == 200
    assert report.tokens.examples == 400  # each side is one sequence
    assert report.truncated == 0 and report.dropped_no_target == 0 and report.reference_overlap == 0
    assert 0 < report.tokens.trainable_tokens < report.tokens.total_tokens
    json.dumps(report.to_dict())


# -- tokenized with SmolLM2 -----------------------------------------------------------------------------

TINY = [
    pair([{"role": "system", "content": "Answer briefly."}, u("hi"), a("hello"), u("Is the sea salty?")],
         [a("Yes, about 3.5 % salt.")], [a("No, it is fresh water.")]),
    pair([u("Name a colour.")], [a("Blue.")], [a("I will not.")]),
]


def test_pairs_become_interleaved_sides_with_answer_only_targets(tmp_path, tokenizer):
    path = _write(tmp_path / "p.jsonl", TINY)
    ds = build_dataset(path, tokenizer, max_seq_len=512, min_examples=1)
    assert ds.format == "preference" and ds.is_preference and ds.report.format == "preference"
    assert len(ds) == 4 and [e.line for e in ds.examples] == [1, 1, 2, 2]
    for k, row in enumerate(TINY):
        chosen, rejected = ds.examples[2 * k], ds.examples[2 * k + 1]
        prompt = tokenizer.apply_chat_template(row["input"]["messages"], tokenize=False, add_generation_prompt=True)
        for side, answer in ((chosen, row["preferred_output"][0]), (rejected, row["non_preferred_output"][0])):
            first = next(i for i, lab in enumerate(side.labels) if lab != IGNORE_INDEX)
            # everything before the answer (system, user and the input's assistant turns) is -100
            assert all(lab == IGNORE_INDEX for lab in side.labels[:first])
            assert _decode(tokenizer, side.input_ids[:first]) == prompt
            # the targets are exactly the answer's tokens and its closing <|im_end|>
            assert _decode(tokenizer, _supervised(side.input_ids, side.labels)) == answer["content"] + IM_END
            targets = [i for i, lab in enumerate(side.labels) if lab != IGNORE_INDEX]
            assert targets == list(range(first, first + len(targets)))
            assert side.labels[first:first + len(targets)] == side.input_ids[first:first + len(targets)]
            assert all(lab == IGNORE_INDEX for lab in side.labels[first + len(targets):])
        # identical input prefixes: the sides differ only from the answer on
        p_chosen = chosen.labels.index(next(lab for lab in chosen.labels if lab != IGNORE_INDEX))
        p_rejected = rejected.labels.index(next(lab for lab in rejected.labels if lab != IGNORE_INDEX))
        assert p_chosen == p_rejected and chosen.input_ids[:p_chosen] == rejected.input_ids[:p_rejected]
    # what preference_sides gives, through the chat path, is the same encoding
    sides = _write(tmp_path / "sides.jsonl", [
        {"messages": [{"role": m.role, "content": m.content, **({"weight": m.weight} if m.role == "assistant" else {})}
                      for m in side.messages]}
        for row in TINY for side in preference_sides(parse_record(json.dumps(row)))])
    chat = build_dataset(sides, tokenizer, max_seq_len=512, min_examples=1)
    assert [(e.input_ids, e.labels) for e in chat.examples] == [(e.input_ids, e.labels) for e in ds.examples]
    assert chat.format == "chat" and not chat.is_preference


def test_over_length_side_is_an_error_naming_line_and_side(tmp_path, tokenizer):
    long_answer = "The sea is salty because rivers carry dissolved minerals into it. " * 6
    rows = [TINY[1], pair([u("Why is the sea salty?")], [a("Minerals.")], [a(long_answer)]), TINY[0]]
    path = _write(tmp_path / "p.jsonl", rows)
    sizes = [len(e.input_ids) for e in build_dataset(path, tokenizer, max_seq_len=2048, min_examples=1).examples]
    short, long = sizes[2], sizes[3]
    limit = long - 1
    assert short <= limit and max(sizes[:2] + sizes[4:]) <= limit
    report = validate_file(path, tokenizer=tokenizer, max_seq_len=limit, limits=SMALL)
    message = (f"the input and this answer take {long} tokens > max_seq_len {limit}; shorten the conversation or "
               "raise max_seq_len")
    assert [(e.line, e.field, e.message) for e in report.errors] == [(2, "non_preferred_output", message)]
    assert report.truncated == 0 and report.valid_examples == 2 and report.tokens.examples == 4
    with pytest.raises(DataError) as exc:
        build_dataset(path, tokenizer, max_seq_len=limit, min_examples=1)
    assert f"line 2, field non_preferred_output: {message}" in str(exc.value)
    ds = build_dataset(path, tokenizer, max_seq_len=limit, min_examples=1, skip_invalid=True)
    assert [e.line for e in ds.examples] == [1, 1, 3, 3] and ds.report.skipped_invalid == 1
    # the preferred side is named when it is the long one
    swapped = _write(tmp_path / "s.jsonl", [pair([u("Why is the sea salty?")], [a(long_answer)], [a("Minerals.")])])
    [err] = validate_file(swapped, tokenizer=tokenizer, max_seq_len=limit, limits=SMALL).errors
    assert (err.line, err.field) == (1, "preferred_output")
    assert f"take {long} tokens > max_seq_len {limit}" in err.message


def test_train_on_inputs_is_refused_for_preference_data(tmp_path, tokenizer):
    path = _write(tmp_path / "p.jsonl", TINY)
    with pytest.raises(DataError) as exc:
        build_dataset(path, tokenizer, max_seq_len=512, min_examples=1, train_on_inputs=True)
    assert "train_on_inputs does not apply to preference data" in str(exc.value)
    assert len(build_dataset(path, tokenizer, max_seq_len=512, min_examples=1)) == 4


def test_preference_data_needs_a_chat_template(tmp_path, tokenizer):
    no_template = copy.deepcopy(tokenizer)
    no_template.chat_template = None
    path = _write(tmp_path / "p.jsonl", TINY)
    assert check_tokenizer(path, tokenizer) == "preference"
    with pytest.raises(DataError, match="preference data: .*no chat template"):
        check_tokenizer(path, no_template)
    with pytest.raises(DataError, match="no chat template"):
        build_dataset(path, no_template, max_seq_len=512, min_examples=1)
