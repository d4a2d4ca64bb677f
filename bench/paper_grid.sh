#!/usr/bin/env bash
# Issue 11 item 4 on a CPU: the paper's own setting (arXiv 2602.13073 as far as it is stated): WikiText-2,
# batch 1, seq 256, AdamW lr 1e-4, wd 0.01 (TrainConfig's default), constant lr (no warmup), 1,000 steps,
# seed 42, LoRA r16/alpha 32 on all seven projections, SmolLM2-135M-Instruct NF4. Schedules: full, the
# paper's LCSB cyclic at k = L/4 (8 of 30) and L/2 (15 of 30), freeze, and the rule's winner topfull/4.
# Three lanes of one torch thread side by side on the 2-core machine (the three lanes hold about equal
# work: 1,000 steps of full cost about as much as two of the selective runs); evaluations at steps 0, 500 and 1,000 on
# 100 held-out blocks of 256 tokens; every step's train loss is kept (the last-100-step gap). Each run
# writes one JSON file; an existing file is skipped, so the grid resumes; a run stopped early leaves
# <name>.partial.json with its evaluations so far.
#   bash bench/paper_grid.sh          # all three lanes in the background of one shell
#   python bench/quality_report.py paper bench/results/paper_setting
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
export OMP_NUM_THREADS=1
OUT=bench/results/paper_setting
Q="$PY bench/quality.py --task wikitext --seeds 42 --lrs 1e-4 --batch 1 --seq 256 --steps 1000 --warmup 0
   --eval-every 500 --eval-examples 100 --threads 1 --out $OUT"
case "${1:-all}" in
  lane1) $Q --schedules full,freeze ;;
  lane2) $Q --schedules cyclic,topfull/4 ;;
  lane3) $Q --schedules cyclic@0.5 ;;
  all) for lane in lane1 lane2 lane3; do bash "$0" $lane > $OUT.$lane.log 2>&1 & done; wait ;;
esac
