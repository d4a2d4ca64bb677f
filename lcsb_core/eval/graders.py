"""Graders of a graded evaluation: each scores one model answer against its reference, 0.0 to 1.0.
Torch-free (the service validates grader specs at job creation with `parse_graders`).

    graders = parse_graders([{"type": "numeric"}, {"type": "regex", "pattern": r"####\\s*-?\\d"},
                             {"type": "string_check", "operation": "ilike", "name": "has_ref"}])
    graders[0].grade("So she has 1,200 apples. #### 1,200", "#### 1200")   # 1.0

Types (a spec is a dict with `type`, an optional `name`, default the type, unique per job; the score is
reported as the metric `grader/<name>`, see `metric_key`):
    exact_match   the answer equals the reference, both stripped of surrounding whitespace
    numeric       the answer's number equals the reference's (`extract_number`: the one after GSM8K's
                  `####`, else the last number; commas, `$`, units and signs allowed), compared as
                  numbers (1e-6 relative tolerance); no number in either -> 0
    regex         the answer matches `pattern` (Python `re.search`); compiled once, when the spec is parsed
    contains      the answer contains `value` (default: the reference); `case_sensitive` (default true)
    json_valid    the stripped answer parses as JSON
    string_check  OpenAI's grader spelling (platform.openai.com/docs/guides/graders, "String check"):
                  `operation` eq -> exact_match, like -> contains, ilike -> contains case-insensitive;
                  `ne` and anything else is refused. `input` must be "{{sample.output_text}}" when given;
                  `reference` is "{{item.reference}}" (the sample's reference, the default) or a literal.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Any

from lcsb_core.errors import ConfigError

GRADER_TYPES = ("exact_match", "numeric", "regex", "contains", "json_valid")
STRING_CHECK = "string_check"
METRIC_PREFIX = "grader/"
SAMPLE_OUTPUT = "{{sample.output_text}}"
ITEM_REFERENCE = "{{item.reference}}"
_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
_OPERATIONS = {"eq": ("exact_match", True), "like": ("contains", True), "ilike": ("contains", False)}
_KEYS = {"exact_match": (), "numeric": (), "regex": ("pattern",), "contains": ("value", "case_sensitive"),
         "json_valid": (), STRING_CHECK: ("operation", "input", "reference")}
# A number: optional sign (and `$` after it), digits with optional thousands commas, optional decimals.
_NUMBER = re.compile(r"(?<![\w.])([-+\u2212]?)\$?((?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?|\.\d+)")
_GSM8K_FINAL = re.compile(r"####\s*(.*)")


def metric_key(name: str) -> str:
    """The metric a grader's score is reported as: `grader/<name>`."""
    return METRIC_PREFIX + name


def extract_number(text: str) -> float | None:
    """The answer's number: the first number after the last `####` (GSM8K's final-answer mark) when
    there is one, else the last number in `text`. Thousands commas and a `$` are dropped; `-`, `+` and
    U+2212 are signs; a trailing unit or period is ignored ("1,200 apples." -> 1200.0). None when there is
    no number."""
    marks = _GSM8K_FINAL.findall(text)
    if marks:
        found = _NUMBER.findall(marks[-1])
        if found:
            return _to_float(*found[0])
    found = _NUMBER.findall(text)
    return _to_float(*found[-1]) if found else None


def _to_float(sign: str, digits: str) -> float:
    value = float(digits.replace(",", ""))
    return -value if sign in ("-", "\u2212") else value


@dataclass(frozen=True)
class Grader:
    """One parsed grader: `name` (unique in the job), `type` (one of GRADER_TYPES), and its options:
    `pattern` (regex), `value` (contains: a fixed string; None = the reference), `case_sensitive`."""

    name: str
    type: str
    pattern: re.Pattern[str] | None = None
    value: str | None = None
    case_sensitive: bool = True

    @property
    def metric(self) -> str:
        return metric_key(self.name)

    def grade(self, answer: str, reference: str) -> float:
        """The score of `answer` against `reference`: 1.0 or 0.0."""
        if self.type == "exact_match":
            ok = answer.strip() == reference.strip()
        elif self.type == "numeric":
            got, want = extract_number(answer), extract_number(reference)
            ok = got is not None and want is not None and math.isclose(got, want, rel_tol=1e-6, abs_tol=1e-9)
        elif self.type == "regex":
            ok = self.pattern is not None and self.pattern.search(answer) is not None
        elif self.type == "contains":
            needle = reference if self.value is None else self.value
            ok = bool(needle.strip()) and (needle in answer if self.case_sensitive
                                           else needle.casefold() in answer.casefold())
        else:  # json_valid
            ok = _is_json(answer)
        return 1.0 if ok else 0.0


def _is_json(text: str) -> bool:
    try:
        json.loads(text.strip())
    except ValueError:
        return False
    return bool(text.strip())


def parse_grader(raw: Any, field: str) -> Grader:
    """One grader spec (a dict, see the module docstring) -> `Grader`; `field` names it in errors
    ("eval.graders[0]").

    Raises:
        ConfigError: not a mapping, unknown type or key, a bad name, a `string_check` operation other than
            eq/like/ilike, a `pattern` that does not compile; naming the field.
    """
    if isinstance(raw, Grader):
        return raw
    if not isinstance(raw, dict):
        raise ConfigError(field, f"must be a mapping with a type, got {type(raw).__name__}")
    kind = raw.get("type")
    if kind not in _KEYS:
        raise ConfigError(f"{field}.type", f"must be one of {', '.join((*GRADER_TYPES, STRING_CHECK))}, got {kind!r}")
    unknown = sorted(set(raw) - {"type", "name", *_KEYS[kind]})
    if unknown:
        raise ConfigError(f"{field}.{unknown[0]}", f"is not an option of a {kind} grader; valid: "
                                                   f"{', '.join(sorted({'type', 'name', *_KEYS[kind]}))}")
    name = raw.get("name") or kind
    if not isinstance(name, str) or not _NAME.match(name):
        raise ConfigError(f"{field}.name", f"must be 1-64 letters, digits, '_', '.' or '-', got {name!r}")
    if kind == STRING_CHECK:
        return _string_check(raw, name, field)
    if kind == "regex":
        return Grader(name, kind, pattern=_compile(raw.get("pattern"), f"{field}.pattern"))
    if kind == "contains":
        value, case = raw.get("value"), raw.get("case_sensitive", True)
        if value is not None and (not isinstance(value, str) or not value.strip()):
            raise ConfigError(f"{field}.value", "must be a non-empty string (leave it out to use the reference)")
        if not isinstance(case, bool):
            raise ConfigError(f"{field}.case_sensitive", f"must be true or false, got {case!r}")
        return Grader(name, kind, value=value, case_sensitive=case)
    return Grader(name, kind)


def _compile(pattern: Any, field: str) -> re.Pattern[str]:
    if not isinstance(pattern, str) or not pattern:
        raise ConfigError(field, "a regex grader needs a non-empty pattern string")
    try:
        return re.compile(pattern)
    except re.error as exc:
        raise ConfigError(field, f"does not compile as a Python regular expression: {exc}") from exc


def _string_check(raw: dict, name: str, field: str) -> Grader:
    """OpenAI's `string_check` as one of ours (eq, like, ilike)."""
    op = raw.get("operation")
    if op not in _OPERATIONS:
        raise ConfigError(f"{field}.operation", f"{op!r} is not supported; string_check takes eq (exact_match), "
                                                "like (contains) or ilike (contains, case-insensitive)")
    if raw.get("input", SAMPLE_OUTPUT) != SAMPLE_OUTPUT:
        raise ConfigError(f"{field}.input", f"must be {SAMPLE_OUTPUT!r} (the model's answer), got {raw['input']!r}")
    reference = raw.get("reference", ITEM_REFERENCE)
    if not isinstance(reference, str) or not reference.strip():
        raise ConfigError(f"{field}.reference", f"must be {ITEM_REFERENCE!r} or a non-empty string")
    kind, case = _OPERATIONS[op]
    literal = None if reference == ITEM_REFERENCE else reference
    if kind == "exact_match" and literal is not None:
        raise ConfigError(f"{field}.reference", f"eq compares with the sample's reference: use {ITEM_REFERENCE!r}")
    return Grader(name, kind, value=literal, case_sensitive=case)


def parse_graders(raw: Any, field: str = "eval.graders") -> tuple[Grader, ...]:
    """A list of grader specs -> Graders (1 to 16, names unique).

    Raises:
        ConfigError: an empty or too long list, a repeated name, or a bad spec (`parse_grader`).
    """
    if not isinstance(raw, (list, tuple)) or not 1 <= len(raw) <= 16:
        raise ConfigError(field, "must be a list of 1 to 16 graders")
    graders = tuple(parse_grader(g, f"{field}[{i}]") for i, g in enumerate(raw))
    seen: set[str] = set()
    for i, g in enumerate(graders):
        if g.name in seen:
            raise ConfigError(f"{field}[{i}].name", f"{g.name!r} is used twice; give each grader its own name")
        seen.add(g.name)
    return graders


def spec_of(grader: Grader) -> dict[str, Any]:
    """A parsed grader as its plain spec (what `TrainConfig.to_dict` stores and `parse_grader` reads back)."""
    out: dict[str, Any] = {"type": grader.type, "name": grader.name}
    if grader.pattern is not None:
        out["pattern"] = grader.pattern.pattern
    if grader.type == "contains":
        if grader.value is not None:
            out["value"] = grader.value
        out["case_sensitive"] = grader.case_sensitive
    return out


def grade_all(graders: tuple[Grader, ...], answers: list[str], references: list[str]) -> tuple[
        list[dict[str, float]], dict[str, float]]:
    """Grade each answer with every grader: (per-sample grades {name: score}, mean per metric
    {`grader/<name>`: mean score}); means are 0.0 for no samples."""
    grades = [{g.name: g.grade(a, r) for g in graders} for a, r in zip(answers, references, strict=True)]
    means = {g.metric: (sum(row[g.name] for row in grades) / len(grades) if grades else 0.0) for g in graders}
    return grades, means
