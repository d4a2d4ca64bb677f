"""The documentation's relative links resolve: every `[text](path#anchor)` and `![alt](path)` in README.md,
BENCHMARKS.md and docs/*.md names a file that exists, and its anchor matches a heading of that file by
GitHub's slug rules (lowercase; punctuation other than `-`, `_` and spaces removed; each space a `-`;
a repeated heading gets `-1`, `-2`, ...). README.md stays an index: under 150 lines.

Markdown is parsed with markdown-it-py (tables on), so links inside code spans and fenced blocks are not
links, as on GitHub. Run: `.venv/bin/python -m pytest -q tests/test_docs_links.py`."""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path
from urllib.parse import unquote

import pytest
from markdown_it import MarkdownIt
from markdown_it.token import Token

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", ROOT / "BENCHMARKS.md", *sorted((ROOT / "docs").glob("*.md"))]
README_MAX_LINES = 150
_MD = MarkdownIt("commonmark").enable("table")


def github_slug(heading: str) -> str:
    """The anchor GitHub gives a heading's plain text (before the duplicate suffix).

    >>> github_slug("6f. Confirmation: the default, `tail` and full backprop")
    '6f-confirmation-the-default-tail-and-full-backprop'
    """
    text = heading.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def _inline_text(token: Token) -> str:
    """A heading's text as GitHub slugs it: code spans and link texts kept, markup dropped."""
    return "".join(child.content for child in token.children or [] if child.type in ("text", "code_inline"))


def _tokens(path: Path) -> list[Token]:
    return _MD.parse(path.read_text(encoding="utf-8"))


@cache
def anchors(path: Path) -> frozenset[str]:
    """Every heading anchor of a Markdown file, with GitHub's `-N` suffixes for repeats."""
    seen: dict[str, int] = {}
    found = set()
    tokens = _tokens(path)
    for opening, inline in zip(tokens, tokens[1:], strict=False):
        if opening.type != "heading_open":
            continue
        slug = github_slug(_inline_text(inline))
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        found.add(slug if count == 0 else f"{slug}-{count}")
    return frozenset(found)


def links(path: Path) -> list[tuple[int, str]]:
    """(1-based line, target) of every link and image in the file, code excluded."""
    out = []
    for block in _tokens(path):
        line = block.map[0] + 1 if block.map else 0
        for child in block.children or []:
            if child.type == "link_open":
                out.append((line, str(child.attrs["href"])))
            elif child.type == "image":
                out.append((line, str(child.attrs["src"])))
    return out


def broken_links(path: Path) -> list[str]:
    """Problems with the file's relative links, each naming the file, line and target."""
    problems = []
    for line, target in links(path):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
            continue
        file_part, _, anchor = target.partition("#")
        dest = (path.parent / unquote(file_part)).resolve() if file_part else path
        where = f"{path.relative_to(ROOT)}:{line}: {target}"
        if not dest.exists():
            problems.append(f"{where}: no file {dest.relative_to(ROOT) if dest.is_relative_to(ROOT) else dest}")
        elif anchor and (dest.suffix != ".md" or anchor not in anchors(dest)):
            problems.append(f"{where}: no heading with anchor #{anchor} in {dest.relative_to(ROOT)}")
    return problems


@pytest.mark.parametrize("path", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(path: Path):
    assert broken_links(path) == []


def test_readme_is_an_index_under_150_lines():
    lines = (ROOT / "README.md").read_text(encoding="utf-8").count("\n")
    assert lines < README_MAX_LINES, f"README.md has {lines} lines; move detail to docs/ (limit {README_MAX_LINES})"


def test_slug_rules_match_github(tmp_path: Path):
    page = tmp_path / "page.md"
    page.write_text("# Against Hugging Face `Trainer` + PEFT\n\n## Notes\n\n## Notes\n\n[x](#notes-1) [y](#nope)\n")
    assert anchors(page) == {"against-hugging-face-trainer--peft", "notes", "notes-1"}
    assert [target for _, target in links(page)] == ["#notes-1", "#nope"]
