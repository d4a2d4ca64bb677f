#!/usr/bin/env bash
# Issue 11's confirmation runs (BENCHMARKS 6f): the default (topfull/4), the best schedule at equal time
# (tail) and full backprop, each at lr 8e-4 (their best in 6d), on more seeds, on WikiText-2 and on
# Gemma-3-270M. Two lanes of one torch thread each run side by side on a 2-core machine; every run
# writes one JSON file and an existing file is skipped, so the grid resumes after an interruption.
#   bash bench/confirm_grid.sh            # both lanes, in the background of one shell
#   bash bench/confirm_grid.sh lane1      # one lane
#   bash bench/confirm_grid.sh wikitext 2 # one WikiText-2 seed of SmolLM2
# Step counts are whole cycles of every schedule (topfull/4 and tail: 4 steps on SmolLM2's 30 layers
# at k = 8; on Gemma's 18 layers at k = 4, topfull/4 has 4 and tail 5, so 20 steps); the selective runs
# go on past full's last step so their curves cover full backprop's wall-clock time.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
export OMP_NUM_THREADS=1
Q="$PY bench/quality.py --threads 1 --warmup 5 --lrs 8e-4"
OUT=bench/results/schedules_confirm

lane1() {  # GSM8K, SmolLM2, seeds 1 and 2 (seed 0 is 6e)
  for seed in 1 2; do
    $Q --task gsm8k --schedules full,topfull/4,tail --seeds $seed --steps 32 --extend topfull/4=48,tail=44 \
       --eval-every 16 --eval-examples 100 --out $OUT/gsm8k
  done
  wikitext 1  # WikiText-2, SmolLM2, seed 1
}

wikitext() {
  $Q --task wikitext --seq 256 --schedules full,topfull/4,tail --seeds "$1" --steps 32 \
     --extend topfull/4=48,tail=44 --eval-every 16 --eval-examples 100 --out $OUT/wikitext
}

lane2() {  # WikiText-2 seed 0, Gemma-3-270M (prompt/completion GSM8K, then text), WikiText-2 seed 2
  wikitext 0
  $Q --model gemma-3-270m --task gsm8k --schedules full,topfull/4,tail --seeds 0 --steps 20 \
     --eval-every 20 --eval-examples 64 --out $OUT/gemma_gsm8k
  $Q --model gemma-3-270m --task wikitext --seq 256 --schedules full,topfull/4,tail --seeds 0 --steps 20 \
     --eval-every 20 --eval-examples 64 --out $OUT/gemma_wikitext
  wikitext 2
}

case "${1:-both}" in
  lane1) lane1 ;;
  lane2) lane2 ;;
  wikitext) wikitext "$2" ;;   # one WikiText-2 seed
  both) lane1 > $OUT.lane1.log 2>&1 & lane2 > $OUT.lane2.log 2>&1 & wait ;;
esac
