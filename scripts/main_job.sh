#!/usr/bin/env bash
# The main job: set up (if needed), then fine-tune SmolLM2-135M-Instruct (4-bit NF4, LCSB cyclic,
# k = 1/4 of the decoder layers) on 400 GSM8K training examples, evaluating on 64 held-out GSM8K test
# examples before and after. Prints eval loss before/after, steps, time, peak memory, output folder.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x .venv/bin/lcsb ] || bash scripts/setup.sh
DATA=${LCSB_SHARED_DATA:-../shared/data}
mkdir -p runs/data
.venv/bin/lcsb gsm8k-to-chat "$DATA/gsm8k/train.jsonl" runs/data/gsm8k_train400.jsonl --limit 400
.venv/bin/lcsb gsm8k-to-chat "$DATA/gsm8k/test.jsonl" runs/data/gsm8k_test64.jsonl --limit 64
rm -rf runs/gsm8k-lcsb
.venv/bin/lcsb train examples/gsm8k_lcsb.yaml
