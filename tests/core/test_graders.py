"""Graders on real GSM8K answers (../shared/data/gsm8k) and on adversarial inputs; the `eval` config
section; prompts and references read from chat and prompt/completion files."""

import json
import re
from pathlib import Path

import pytest

from lcsb_core.errors import ConfigError, DataError
from lcsb_core.eval.graders import extract_number, grade_all, metric_key, parse_graders
from lcsb_core.eval.samples import read_samples
from lcsb_core.eval.settings import EvalSettings
from lcsb_core.training.config import TrainConfig

GSM8K = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "gsm8k"


@pytest.fixture(scope="module")
def gsm8k_train() -> list[dict]:
    path = GSM8K / "train.jsonl"
    assert path.is_file(), f"GSM8K data missing at {path}"
    return [json.loads(line) for line in path.read_text().splitlines()]


def final(answer: str) -> str:
    return answer.rsplit("####", 1)[1].strip()


def worked(answer: str) -> str:
    """The worked solution without its `#### n` line: an answer that states the number in prose."""
    return answer.rsplit("####", 1)[0]


def test_numeric_reads_the_final_answer_of_real_gsm8k_rows(gsm8k_train):
    rows = {i: gsm8k_train[i]["answer"] for i in (0, 1, 345, 367, 5715)}
    # 0: units ("72 clips") and several numbers; 1: "$", decimals (0.2) and several numbers;
    # 345/367: thousands commas after ####; 5715: a negative answer
    assert {i: extract_number(a) for i, a in rows.items()} == {0: 72.0, 1: 10.0, 345: 1080.0, 367: 850000.0,
                                                               5715: -7.0}
    assert [final(rows[i]) for i in (345, 367, 5715)] == ["1,080", "850,000", "-7"]
    # the prose alone: its last number is the answer ("... 72 clips altogether", "$<<0.2*50=10>>10.")
    assert extract_number(worked(rows[0])) == 72.0 and extract_number(worked(rows[1])) == 10.0


def test_numeric_grades_every_real_answer_against_its_own_reference(gsm8k_train):
    (numeric,) = parse_graders([{"type": "numeric"}])
    rows = gsm8k_train[:500]
    assert all(numeric.grade(r["answer"], r["answer"]) == 1.0 for r in rows)
    # the bare final answer against the full reference (commas on one side only count as equal)
    assert all(numeric.grade(final(r["answer"]).replace(",", ""), r["answer"]) == 1.0 for r in rows)
    # another row's answer is wrong unless the two happen to share the number
    wrong = [numeric.grade(a["answer"], b["answer"]) for a, b in zip(rows, rows[1:], strict=False)]
    same = [extract_number(a["answer"]) == extract_number(b["answer"]) for a, b in zip(rows, rows[1:], strict=False)]
    assert wrong == [1.0 if s else 0.0 for s in same] and sum(wrong) < 20


@pytest.mark.parametrize(("answer", "number"), [
    ("", None), ("   ", None), ("I do not know.", None), ("The answer is $1,234.50 dollars.", 1234.5),
    ("16-3-4=9 eggs", 9.0), ("it fell to -7 degrees", -7.0), ("\u22125", -5.0), ("####", None),
    ("#### 12 apples, 3 pears", 12.0), ("first 5 then #### 1,200 and later 9", 1200.0), ("abc123", None),
    (".5 of it", 0.5),
])
def test_extract_number_on_adversarial_text(answer, number):
    assert extract_number(answer) == number


# Issue 48 item 4: each of these once read as another number ("$9{,}500" as 500, "1,00,000" as 0, "1½" as 1,
# "½" as none, "3/4" as 4, "1,0000" as 1000); now its true value, or None where it is not well formed.
@pytest.mark.parametrize(("answer", "number"), [
    ("$9{,}500", 9500.0), ("The total is $9{,}500.", 9500.0), (r"\$9{,}500", 9500.0), (r"9\,500", 9500.0),
    ("1,00,000", 100000.0), ("12,34,567 rupees", 1234567.0), ("10,00,000", 1000000.0), ("#### 1,00,000", 100000.0),
    ("1½", 1.5), ("½", 0.5), ("-1½ cups", -1.5), ("1 ½.", 1.5), ("¾ of it", 0.75),
    ("3/4", 0.75), ("3\u20444", 0.75), ("-3/4", -0.75), ("1 1/2", 1.5), ("#### 2 3/4 miles", 2.75), ("-1 1/2", -1.5),
    (r"\frac{3}{4}", 0.75), (r"\boxed{\frac{3}{4}}", 0.75), (r"$-\dfrac{1}{4}$", -0.25), (r"2\frac{1}{2}", 2.5),
    (r"\frac{1{,}000}{4}", 250.0), (r"\frac34", 0.75),
])
def test_extract_number_reads_latex_indian_grouping_and_fractions(answer, number):
    assert extract_number(answer) == pytest.approx(number)


@pytest.mark.parametrize("answer", [
    "1,0000", "1,00", "1,000,00", "3,5", "1,2,3", "1.2.3", "3/4/5", "1/0", r"\frac{x}{2}", r"\frac{3}{0}",
    "first 7, then 1,0000", "#### 1,0000", "#### 1/0 and later 9",
])
def test_extract_number_refuses_malformed_numbers_rather_than_reading_another(answer):
    # a malformed last token (or first after ####) is no number, never its parts or an earlier number
    assert extract_number(answer) is None


def test_numeric_grader_on_the_fixed_forms():
    (numeric,) = parse_graders([{"type": "numeric"}])
    assert numeric.grade("$9{,}500", "#### 9500") == 1.0 and numeric.grade("$9{,}500", "#### 500") == 0.0
    assert numeric.grade("1,00,000", "100000") == 1.0 and numeric.grade("1,00,000", "0") == 0.0
    assert numeric.grade("1½", "1.5") == 1.0 and numeric.grade("3/4", "0.75") == 1.0
    assert numeric.grade("1,0000", "10000") == 0.0 and numeric.grade("1,0000", "1000") == 0.0


@pytest.mark.parametrize(("answer", "ok"), [
    ("NaN", 0.0), ("Infinity", 0.0), ("-Infinity", 0.0), ("[1, NaN]", 0.0), ('{"a": Infinity}', 0.0),
    ('{"a": -Infinity}', 0.0), ('"NaN"', 1.0), ('{"a": 1.5e300}', 1.0), ("[]", 1.0), ("", 0.0), ("nan", 0.0),
])
def test_json_valid_is_strict_json(answer, ok):
    (json_valid,) = parse_graders([{"type": "json_valid"}])
    assert json_valid.grade(answer, "") == ok


def test_each_grader_on_real_and_adversarial_answers(gsm8k_train):
    ref = gsm8k_train[0]["answer"]  # "... 72 clips altogether in April and May.\n#### 72"
    graders = parse_graders([
        {"type": "exact_match"}, {"type": "numeric"}, {"type": "regex", "pattern": r"####\s*-?[\d,]+"},
        {"type": "contains", "value": "clips", "name": "says_clips"},
        {"type": "contains", "value": "CLIPS", "case_sensitive": False, "name": "says_clips_any_case"},
        {"type": "json_valid"}])
    answers = [ref, "  " + ref + "\n", "Natalia sold 72 clips.", "", "#### 71", '{"answer": 72}']
    grades, means = grade_all(graders, answers, [ref] * len(answers))
    table = [[g[name] for name in ("exact_match", "numeric", "regex", "says_clips", "says_clips_any_case",
                                   "json_valid")] for g in grades]
    assert table == [[1, 1, 1, 1, 1, 0], [1, 1, 1, 1, 1, 0], [0, 1, 0, 1, 1, 0], [0, 0, 0, 0, 0, 0],
                     [0, 0, 1, 0, 0, 0], [0, 1, 0, 0, 0, 1]]
    assert means[metric_key("numeric")] == pytest.approx(4 / 6) and set(means) == {
        "grader/exact_match", "grader/numeric", "grader/regex", "grader/says_clips", "grader/says_clips_any_case",
        "grader/json_valid"}
    # contains without a value looks for the reference; an empty reference matches nothing
    (contains,) = parse_graders([{"type": "contains"}])
    assert contains.grade("the answer is 72 clips", "72 clips") == 1.0 and contains.grade("anything", "  ") == 0.0


def test_openai_string_check_maps_to_ours():
    eq, like, ilike, literal = parse_graders([
        {"type": "string_check", "name": "eq", "operation": "eq", "input": "{{sample.output_text}}",
         "reference": "{{item.reference}}"},
        {"type": "string_check", "name": "like", "operation": "like"},
        {"type": "string_check", "name": "ilike", "operation": "ilike"},
        {"type": "string_check", "name": "lit", "operation": "ilike", "reference": "Paris"}])
    assert (eq.type, like.type, like.case_sensitive, ilike.case_sensitive) == ("exact_match", "contains", True, False)
    assert eq.grade(" Paris ", "Paris") == 1.0 and like.grade("in paris", "Paris") == 0.0
    assert ilike.grade("in paris", "Paris") == 1.0 and literal.grade("PARIS!", "Rome") == 1.0


@pytest.mark.parametrize(("spec", "field", "words"), [
    ({"type": "regex", "pattern": "(unclosed"}, "eval.graders[0].pattern", "does not compile"),
    ({"type": "regex"}, "eval.graders[0].pattern", "non-empty pattern"),
    ({"type": "string_check", "operation": "ne"}, "eval.graders[0].operation", "'ne' is not supported"),
    ({"type": "string_check", "operation": "eq", "input": "{{item.x}}"}, "eval.graders[0].input", "sample.output_text"),
    ({"type": "bleu"}, "eval.graders[0].type", "must be one of"),
    ({"type": "numeric", "pattern": "x"}, "eval.graders[0].pattern", "not an option of a numeric grader"),
    ({"type": "numeric", "name": "a b"}, "eval.graders[0].name", "letters, digits"),
    ({"type": "contains", "value": ""}, "eval.graders[0].value", "non-empty"),
    ("numeric", "eval.graders[0]", "must be a mapping"),
])
def test_bad_grader_specs_name_their_field(spec, field, words):
    with pytest.raises(ConfigError) as err:
        parse_graders([spec])
    assert err.value.field == field and words in err.value.message


def test_grader_names_are_unique_and_the_list_bounded():
    with pytest.raises(ConfigError) as err:
        parse_graders([{"type": "numeric"}, {"type": "numeric"}])
    assert err.value.field == "eval.graders[1].name"
    with pytest.raises(ConfigError, match="1 to 16"):
        parse_graders([])


def test_eval_section_defaults_bounds_and_round_trip(tmp_path):
    raw = {"data": {"train_file": "t.jsonl", "validation_file": "v.jsonl"},
           "eval": {"graders": [{"type": "regex", "pattern": r"\d+"}]}}
    cfg = TrainConfig.from_dict(raw)
    assert (cfg.eval.n_samples, cfg.eval.max_new_tokens, cfg.eval.eval_file) == (64, 128, None)
    assert isinstance(cfg.eval.parsed[0].pattern, re.Pattern)
    again = TrainConfig.from_dict(json.loads(json.dumps(cfg.to_dict())))
    assert again.eval == cfg.eval and again.to_dict() == cfg.to_dict()
    for name, value in (("n_samples", 0), ("n_samples", 513), ("max_new_tokens", 513), ("max_new_tokens", True)):
        with pytest.raises(ConfigError) as err:
            EvalSettings(graders=({"type": "numeric"},), **{name: value})
        assert err.value.field == f"eval.{name}"
    with pytest.raises(ConfigError) as err:
        TrainConfig.from_dict({**raw, "eval": {"graders": [{"type": "numeric"}], "n_sample": 3}})
    assert err.value.field == "eval.n_sample"


def test_graded_eval_needs_a_validation_file_and_references():
    graders = {"graders": [{"type": "numeric"}]}
    with pytest.raises(ConfigError) as err:
        TrainConfig.from_dict({"data": {"train_file": "t.jsonl"}, "eval": graders}).check_honoured()
    assert err.value.field == "eval" and "data.validation_file" in str(err.value)
    corpus = {"data": {"train_file": "t.jsonl", "validation_file": "v.txt"}, "eval": graders}
    with pytest.raises(ConfigError) as err:
        TrainConfig.from_dict(corpus).check_honoured()
    assert err.value.field == "data.validation_file"
    TrainConfig.from_dict({**corpus, "eval": {**graders, "eval_file": "e.jsonl"}}).check_honoured()


def test_samples_from_chat_and_prompt_completion_files(tmp_path, gsm8k_train):
    chat = tmp_path / "chat.jsonl"
    row = gsm8k_train[0]
    lines = [{"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
                           {"role": "assistant", "content": "Hello"}, {"role": "user", "content": row["question"]},
                           {"role": "assistant", "content": row["answer"]}]},
             {"broken": True},
             {"messages": [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4"}]}]
    chat.write_text("".join(json.dumps(x) + "\n" for x in lines))
    first, second = read_samples(chat, 5)
    assert first.reference == row["answer"] and [m["content"] for m in first.messages] == [
        "Be brief.", "Hi", "Hello", row["question"]]
    assert (second.line, second.reference) == (3, "4")
    assert len(read_samples(chat, 1)) == 1

    class Template:  # records what a chat tokenizer is asked to render
        def apply_chat_template(self, messages, tokenize, add_generation_prompt):
            assert tokenize is False and add_generation_prompt is True
            return "|".join(m["content"] for m in messages) + "|<assistant>"

    assert second.render(Template()) == "2+2?|<assistant>"
    pc = tmp_path / "pc.jsonl"
    pc.write_text(json.dumps({"prompt": "Q: 2+2=", "completion": " 4"}) + "\n")
    (only,) = read_samples(pc, 64)
    assert (only.render(Template()), only.reference) == ("Q: 2+2=", " 4")
    text = tmp_path / "text.jsonl"
    text.write_text(json.dumps({"text": "just text"}) + "\n")
    with pytest.raises(DataError, match="no reference"):
        read_samples(text, 4)
