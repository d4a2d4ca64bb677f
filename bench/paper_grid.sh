#!/usr/bin/env bash
# Issue 11 item 4 on a CPU: the paper's own setting (arXiv 2602.13073 as far as it is stated): WikiText-2,
# batch 1, seq 256, AdamW lr 1e-4, wd 0.01 (TrainConfig's default), constant lr (no warmup), 1,000 steps,
# seed 42, LoRA r16/alpha 32 on all seven projections, SmolLM2-135M-Instruct NF4. Schedules: full, the
# paper's LCSB cyclic at k = L/4 (8 of 30) and L/2 (15 of 30), freeze, and the rule's winner topfull/4.
# One process of one torch thread per schedule, all five side by side on the 2-core machine (quality
# does not depend on what shares the cores; speed comes from bench/step_time.py, not from these runs);
# evaluations at steps 0, 500 and 1,000 on 100 held-out blocks of 256 tokens; every step's train loss is kept (the last-100-step gap). Each run
# writes one JSON file; an existing file is skipped, so the grid resumes; a run stopped early leaves
# <name>.partial.json with its evaluations so far.
#   bash bench/paper_grid.sh          # all five runs in the background of one shell
#   bash bench/paper_grid.sh freeze   # one run
#   python bench/quality_report.py paper bench/results/paper_setting
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
export OMP_NUM_THREADS=1
OUT=bench/results/paper_setting
Q="$PY bench/quality.py --task wikitext --seeds 42 --lrs 1e-4 --batch 1 --seq 256 --steps 1000 --warmup 0 \
   --eval-every 500 --eval-examples 100 --threads 1 --out $OUT"
SCHEDULES="full cyclic cyclic@0.5 freeze topfull/4"
if [ "${1:-all}" = all ]; then
  for s in $SCHEDULES; do bash "$0" "$s" > "$OUT.${s//\//_}.log" 2>&1 & done
  wait
else
  $Q --schedules "$1"
fi
