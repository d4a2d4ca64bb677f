#!/usr/bin/env bash
# Issue 14's timing benches as one sequence for a quiet machine (nothing else running): the roofline,
# the step-time tables twice (run a, then run b, with the other benches between them, so the
# reproducibility check of item 1 spans some machine drift), each beside the same table with
# `--allocator retain` (compute alone, no fresh page faults), and the loop-overhead ratios.
# Every bench interleaves its modes round-robin and reports medians of per-round ratios; all use the
# torch default thread count (every core). Each step writes <name>.json, <name>.md (the printed table)
# and <name>.log (the rounds); an existing .json is skipped, so the sequence resumes.
#   bash bench/speed_grid.sh                       # into bench/results/speed_<cpu capability>
#   OUT=bench/results/speed_x bash bench/speed_grid.sh
#   STEPS="schedules_a schedules_b" bash bench/speed_grid.sh   # only these steps
#   .venv/bin/python bench/step_time.py --compare $OUT/schedules_a.json $OUT/schedules_b.json
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
OUT=${OUT:-bench/results/speed_$($PY -c 'import torch; print(torch.backends.cpu.get_cpu_capability().lower())')}
mkdir -p "$OUT"

step() {  # step NAME COMMAND...: run COMMAND --json OUT/NAME.json unless that file exists (or NAME is not in $STEPS)
  local name=$1; shift
  [ -e "$OUT/$name.json" ] && { echo "skip $name"; return 0; }
  [ -n "${STEPS:-}" ] && [[ " $STEPS " != *" $name "* ]] && { echo "not in STEPS: $name"; return 0; }
  echo "$(date -u +%H:%M:%S) $name: $*"
  "$@" --json "$OUT/$name.json" > "$OUT/$name.md" 2> "$OUT/$name.log"
}

# 16 rounds: with 4, a ratio's median moved up to ±16 % between runs; with 16, at most 6.4 % (BENCHMARKS.md 1g)
SCHEDULES="--schedules full,top,topfull/4,topfull/2,tail,freeze,cyclic --warmup-rounds 1 --rounds 16"
TABLE_1A="--schedules full,freeze,cyclic --fractions 0.125,0.25,0.5 --checkpointing both --warmup-rounds 1 --rounds 16"
step roofline $PY bench/roofline.py --dtypes fp32,bf16 --forward-reps 5
step schedules_a $PY bench/step_time.py $SCHEDULES
step schedules_retain_a $PY bench/step_time.py $SCHEDULES --allocator retain
step table1a_a $PY bench/step_time.py $TABLE_1A
step table1a_retain_a $PY bench/step_time.py $TABLE_1A --allocator retain
step overhead_topfull $PY bench/trainer_overhead.py --schedule topfull/4 --warmup-rounds 1 --rounds 8
step overhead_full $PY bench/trainer_overhead.py --schedule full --warmup-rounds 1 --rounds 16
step schedules_b $PY bench/step_time.py $SCHEDULES
step schedules_retain_b $PY bench/step_time.py $SCHEDULES --allocator retain
step table1a_b $PY bench/step_time.py $TABLE_1A
step table1a_retain_b $PY bench/step_time.py $TABLE_1A --allocator retain
for t in schedules table1a schedules_retain table1a_retain; do
    [ -e "$OUT/${t}_b.json" ] && $PY bench/step_time.py --compare "$OUT/${t}_a.json" "$OUT/${t}_b.json" > "$OUT/${t}_compare.md"
done
echo "$(date -u +%H:%M:%S) done: $OUT"
