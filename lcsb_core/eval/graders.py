"""Graders of a graded evaluation: each scores one model answer against its reference, 0.0 to 1.0.
Torch-free (the service validates grader specs at job creation with `parse_graders`).

    graders = parse_graders([{"type": "numeric"}, {"type": "regex", "pattern": r"####\\s*-?\\d"},
                             {"type": "string_check", "operation": "ilike", "name": "has_ref"}])
    graders[0].grade("So she has 1,200 apples. #### 1,200", "#### 1200")   # 1.0

Types (a spec is a dict with `type`, an optional `name`, default the type, unique per job; the score is
reported as the metric `grader/<name>`, see `metric_key`):
    exact_match   the answer equals the reference, both stripped of surrounding whitespace
    numeric       the answer's number equals the reference's (`extract_number`: the first after GSM8K's
                  `####`, else the last number; read under the grammar below), compared as numbers (1e-6
                  relative tolerance); no number in either -> 0
    regex         the answer matches `pattern` (Python `re.search`); compiled once, when the spec is parsed
    contains      the answer contains `value` (default: the reference); `case_sensitive` (default true)
    json_valid    the stripped answer parses as strict JSON (NaN, Infinity and -Infinity, which Python's
                  `json.loads` takes, are refused)
    string_check  OpenAI's grader spelling (platform.openai.com/docs/guides/graders, "String check"):
                  `operation` eq -> exact_match, like -> contains, ilike -> contains case-insensitive;
                  `ne` and anything else is refused. `input` must be "{{sample.output_text}}" when given;
                  `reference` is "{{item.reference}}" (the sample's reference, the default) or a literal.

The numeric grader's number grammar. A number starts where no letter, digit, `_` or `.` comes right before
it; then an optional sign (`-`, `+`, U+2212) and an optional `$`, then one of:
    decimal       digits with an optional `.digits` part, or `.digits` ("1200", "3.5", ".5"). The integer
                  part may be grouped by `,`, LaTeX's `{,}` or `\\,`: Western groups of 3 ("1,234,567",
                  "$9{,}500" -> 9500) or Indian groups of 2 before a last group of 3 ("1,00,000" -> 100000,
                  "12,34,567" -> 1234567). The value is the digits with the separators dropped.
    fraction      a/b (`/` or U+2044) with a, b integers (grouped as above, no decimals): "3/4" -> 0.75;
                  a vulgar fraction character (¼ ½ ¾ ⅐ ⅑ ⅒ ⅓ ⅔ ⅕ ⅖ ⅗ ⅘ ⅙ ⅚ ⅛ ⅜ ⅝ ⅞): "½" -> 0.5; LaTeX's
                  `\\frac{a}{b}` (also `\\dfrac`, `\\tfrac`, `\\frac34`), a and b optionally signed integers:
                  "\\frac{3}{4}" -> 0.75
    mixed         an integer, then nothing or one space, then an unsigned fraction between 0 and 1:
                  "1½", "1 ½", "1 1/2", "1\\frac{1}{2}" -> 1.5 ("-1 1/2" -> -1.5)
Digits joined by `.`, `,`, `{,}`, `\\,` or `/` with no space form one token, read as a whole: one that is not
a number above is "no number", never part of it or another number. So "1,0000", "1,00", "3,5" (a European
decimal comma?), "1,2,3" (a list?), "1.2.3", "3/4/5" (a date?), "1/0" and a `\\frac` whose parts are not
integers give None; such a token as the last number (or first after `####`) makes the answer's number
None, not an earlier number's. Percent signs and units after a number are ignored ("50%" -> 50). Not
understood: exponents ("1e5" reads 1) and space-grouped thousands ("1 000" reads 0).
"""

from __future__ import annotations

import json
import math
import re
import unicodedata
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
# The number grammar (see the module docstring). A token is an optional sign and `$` before a body: a
# `\frac`, a vulgar fraction, or a dense run of digits joined by `.`, `,`, `{,}`, `\,`, `/` or U+2044
# (each joiner followed by a digit), which `_body_value` then reads or refuses as a whole.
_VULGAR = "\u00bc\u00bd\u00be\u2150\u2151\u2152\u2153\u2154\u2155\u2156\u2157\u2158\u2159\u215a\u215b\u215c\u215d\u215e"
_BRACED = r"\{(?:[^{}]|\{[^{}]*\})*\}"  # a brace group, one level of nested braces allowed ("{1{,}000}")
_FRAC = r"\\[dt]?frac(?![A-Za-z])(?:\s*" + _BRACED + r"\s*" + _BRACED + r"|\d\d)?"
_RUN = r"(?:\d|\.\d)(?:\d|[.,/\u2044]\d|\{,\}\d|\\,\d)*"
_NUMBER = re.compile(
    r"(?<![\w.])(?P<sign>[-+\u2212]?)(?P<dollar>\$?)(?P<body>" + _FRAC + "|[" + _VULGAR + "]|" + _RUN + ")"
    # a \frac or vulgar fraction right after a digit ("2\frac{1}{2}", "1½"): the fraction of a mixed number
    r"|(?P<tail>" + _FRAC + r"|(?<=\d)[" + _VULGAR + "])")
_FRAC_PARTS = re.compile(r"\\[dt]?frac\s*(?:\{(?P<num>(?:[^{}]|\{[^{}]*\})*)\}\s*\{(?P<den>(?:[^{}]|\{[^{}]*\})*)\}"
                         r"|(?P<a>\d)(?P<b>\d))")
_SIGNED_INT = re.compile(r"\s*(?P<sign>[-+\u2212]?)(?P<int>[\d,]+)\s*")
_DECIMAL = re.compile(r"(?P<int>[\d,]*)(?:\.(?P<dec>\d+))?")
_GROUPED = re.compile(r"\d{1,3}(?:,\d{3})+|\d{1,2}(?:,\d{2})+,\d{3}")  # 1,234,567 and Indian 12,34,567
_GSM8K_FINAL = re.compile(r"####\s*(.*)")


def metric_key(name: str) -> str:
    """The metric a grader's score is reported as: `grader/<name>`."""
    return METRIC_PREFIX + name


@dataclass(frozen=True)
class _Token:
    """One number token of a text: its span, `magnitude` (None: no number, see `_body_value`), whether it is
    negative, whether it had a sign or `$` before it, and its form: "int", "decimal" or "fraction"."""

    start: int
    end: int
    magnitude: float | None
    negative: bool
    prefixed: bool
    form: str

    @property
    def value(self) -> float | None:
        return None if self.magnitude is None else (-self.magnitude if self.negative else self.magnitude)


def extract_number(text: str) -> float | None:
    """The answer's number: the first number after the last `####` (GSM8K's final-answer mark) when
    there is one, else the last number in `text`, read under the module docstring's grammar ("1,200
    apples." -> 1200.0, "$9{,}500" -> 9500.0, "1,00,000" -> 100000.0, "1½" and "1 1/2" -> 1.5,
    "\\frac{3}{4}" -> 0.75). None when there is no number, or when that number is not well formed
    ("1,0000", "1/0", "3/4/5"): such a token is not skipped for an earlier one."""
    marks = _GSM8K_FINAL.findall(text)
    if marks:
        found = _tokens(marks[-1])
        if found:
            return found[0].value
    found = _tokens(text)
    return found[-1].value if found else None


def _tokens(text: str) -> list[_Token]:
    """The number tokens of `text` in order, a whole number and the proper fraction right after it (nothing
    or one space between, no sign or `$` on the fraction) merged into one mixed number."""
    out: list[_Token] = []
    for m in _NUMBER.finditer(text):
        body = m.group("body") or m.group("tail")
        magnitude, sign, form = _body_value(body)
        negative = (m.group("sign") in ("-", "\u2212")) != (sign in ("-", "\u2212"))
        token = _Token(m.start(), m.end(), magnitude, negative, bool(m.group("sign") or m.group("dollar")), form)
        prev = out[-1] if out else None
        if (prev is not None and prev.form == "int" and prev.magnitude is not None and form == "fraction"
                and magnitude is not None and 0 < magnitude < 1 and not token.prefixed and not sign
                and text[prev.end:token.start] in ("", " ")):
            out[-1] = _Token(prev.start, token.end, prev.magnitude + magnitude, prev.negative, prev.prefixed,
                             "decimal")
            continue
        out.append(token)
    return out


def _body_value(body: str) -> tuple[float | None, str, str]:
    """A token's body -> (magnitude or None when not well formed, the sign inside a `\\frac`, form)."""
    if body.startswith("\\"):
        parts = _FRAC_PARTS.fullmatch(body)
        if parts is None:
            return None, "", "fraction"
        if parts.group("a") is not None:
            return _ratio(int(parts.group("a")), int(parts.group("b"))), "", "fraction"
        num, den = (_SIGNED_INT.fullmatch(_commas(parts.group(k))) for k in ("num", "den"))
        if num is None or den is None:
            return None, "", "fraction"
        a, b = _grouped_int(num.group("int")), _grouped_int(den.group("int"))
        negative = (num.group("sign") in ("-", "\u2212")) != (den.group("sign") in ("-", "\u2212"))
        return (None if a is None or b is None else _ratio(a, b)), ("-" if negative else ""), "fraction"
    if len(body) == 1 and body in _VULGAR:
        return unicodedata.numeric(body), "", "fraction"
    run = _commas(body).replace("\u2044", "/")
    if "/" in run:
        halves = run.split("/")
        a, b = (_grouped_int(halves[0]), _grouped_int(halves[1])) if len(halves) == 2 else (None, None)
        return (None if a is None or b is None else _ratio(a, b)), "", "fraction"
    parts = _DECIMAL.fullmatch(run)
    if parts is None:
        return None, "", "decimal"
    whole, dec = parts.group("int"), parts.group("dec")
    if whole and _grouped_int(whole) is None:
        return None, "", "decimal"
    digits = whole.replace(",", "")
    return float((digits or "0") + ("." + dec if dec else "")), "", ("decimal" if dec else "int")


def _commas(text: str) -> str:
    """LaTeX's thousands separators `{,}` and `\\,` as plain commas."""
    return text.replace("{,}", ",").replace("\\,", ",")


def _grouped_int(digits: str) -> int | None:
    """Digits, plain or in valid Western (1,234,567) or Indian (12,34,567) groups -> int; else None."""
    if re.fullmatch(r"\d+", digits) or _GROUPED.fullmatch(digits):
        return int(digits.replace(",", ""))
    return None


def _ratio(a: int, b: int) -> float | None:
    return a / b if b else None


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
    """Strict JSON (RFC 8259): Python's `json.loads` also takes NaN, Infinity and -Infinity, refused here."""
    try:
        json.loads(text.strip(), parse_constant=_not_json)
    except ValueError:
        return False
    return bool(text.strip())


def _not_json(constant: str) -> Any:
    raise ValueError(f"{constant} is not JSON")


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
