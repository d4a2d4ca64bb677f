"""Shared fixtures for the dataset tests: the SmolLM2 tokenizer, case files, and the shared data sets.

The reference data (GSM8K, WikiText-2) lives in ../shared/data next to the repository; a missing file
fails the test with a message (nothing is skipped)."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
CASES = Path(__file__).resolve().parent / "cases"
SHARED_DATA = REPO_ROOT.parent / "shared" / "data"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "slow: a test that takes more than 30 s (still runs by default)")


@pytest.fixture(scope="session")
def tokenizer():
    from transformers import AutoTokenizer

    from lcsb_core.models.gguf_import import ensure_default_model

    return AutoTokenizer.from_pretrained(ensure_default_model())


@pytest.fixture()
def case():
    def _case(name: str) -> Path:
        path = CASES / name
        assert path.is_file(), f"missing test case file {path}"
        return path

    return _case


@pytest.fixture(scope="session")
def shared_data():
    def _file(rel: str) -> Path:
        path = (SHARED_DATA / rel).resolve()
        if not path.is_file():
            pytest.fail(f"reference data {path} is missing: the shared data folder ../shared/data (next to "
                        "the repository) must hold GSM8K and WikiText-2, see its README.md", pytrace=False)
        return path

    return _file
