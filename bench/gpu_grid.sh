#!/usr/bin/env bash
# The schedules issue's quality runs on a lent GPU (the device tool; never CI), many runs side by side:
#   grid:  the decision grid, GSM8K, SmolLM2-135M-Instruct NF4, seed 0, batch 4, every schedule token
#          at 4 learning rates; full runs STEPS steps, the others EXTENDED steps (their curve past STEPS
#          gives the eval loss at full backprop's wall-clock time); evaluations every EVAL_EVERY steps
#          (a whole number of cycles of every schedule), 100 held-out test examples.
#   paper: the paper's setting, WikiText-2, batch 1, seq 256, lr 1e-4, wd 0.01, constant lr, seed 42,
#          PAPER_STEPS steps, LoRA r16 on all 7 projections, NF4.
# One bench/quality.py process per schedule token (16 CPU cores, one GPU). A run stopped by the time
# limit leaves <name>.partial.json with its evaluations so far. Results and logs are written to $RES
# (outside $OUT: the device tool empties $OUT before each command and returns at most 8 files from it)
# and packed into $OUT/results.tgz, the one file that comes back.
#
# Carried (ignored by git): .dev/src.tgz (a snapshot of the tree, so concurrent edits here cannot
# reach the run), .dev/shared/data (GSM8K's first 2,000 train / 200 test rows, WikiText-2 valid.txt),
# .dev/site (bitsandbytes with only its CUDA 13.0 library, peft, gguf), and SmolLM2's Q4_1 GGUF in two
# parts (98 MB does not fit one 64 MiB call): the first carried by an earlier call into /tmp/gguf.part1.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-runs/gpu-grid}; OUT=$(realpath -m "$OUT"); mkdir -p "$OUT"
RES=${RES:-/tmp/lcsb-results}; rm -rf "$RES"; mkdir -p "$RES"
DEVICE=${DEVICE:-cuda} STEPS=${STEPS:-40} EXTENDED=${EXTENDED:-72} EVAL_EVERY=${EVAL_EVERY:-8}
PAPER_STEPS=${PAPER_STEPS:-1000} PAPER_EVAL_EVERY=${PAPER_EVAL_EVERY:-100} LRS=${LRS:-2e-4,4e-4,8e-4,1.6e-3}
EVAL_EXAMPLES=${EVAL_EXAMPLES:-100} DEADLINE_S=${DEADLINE_S:-380} THREADS=${THREADS:-2}
GRID=${GRID:-full,top,topfull/4,topfull/2,tail,freeze,cyclic,cyclic@0.5}
PAPER=${PAPER:-full,cyclic,cyclic@0.5,freeze,top,topfull/4}
W=/tmp/lcsb-w; rm -rf "$W"; mkdir -p "$W/main"
tar -xzf .dev/src.tgz -C "$W/main" && cp -r .dev/shared "$W/shared" || exit 1
export PYTHONPATH=$PWD/.dev/site:$W/main PYTHONUNBUFFERED=1 LCSB_MODEL_CACHE=/tmp/lcsb-models OMP_NUM_THREADS=$THREADS
if [ ! -f "$LCSB_MODEL_CACHE/SmolLM2-135M-Instruct/model.safetensors" ]; then
  cat /tmp/gguf.part1 .dev/gguf.part2 > /tmp/smollm2.gguf || exit 1
  python3 - <<'PY' || exit 1
import os
from pathlib import Path
from lcsb_core.models.gguf_import import import_gguf, sha256_of
print("gguf sha256", sha256_of(Path("/tmp/smollm2.gguf")))
print(import_gguf(Path("/tmp/smollm2.gguf"), Path(os.environ["LCSB_MODEL_CACHE"]) / "SmolLM2-135M-Instruct"))
PY
fi
cd "$W/main"
pids=()
for tok in ${GRID//,/ }; do
  ext=""; [ "$tok" != full ] && ext="--extend $tok=$EXTENDED"
  python3 bench/quality.py --task gsm8k --schedules "$tok" --seeds 0 --lrs "$LRS" --steps "$STEPS" $ext \
    --warmup 5 --eval-every "$EVAL_EVERY" --eval-examples "$EVAL_EXAMPLES" --device "$DEVICE" --threads "$THREADS" \
    --out "$RES/grid" >"$RES/grid-${tok//[\/@]/_}.log" 2>&1 &
  pids+=($!)
done
for tok in ${PAPER//,/ }; do
  python3 bench/quality.py --task wikitext --schedules "$tok" --seeds 42 --lrs 1e-4 --batch 1 --seq 256 \
    --steps "$PAPER_STEPS" --warmup 0 --eval-every "$PAPER_EVAL_EVERY" --eval-examples 1000 --device "$DEVICE" \
    --threads "$THREADS" --out "$RES/paper" >"$RES/paper-${tok//[\/@]/_}.log" 2>&1 &
  pids+=($!)
done
start=$(date +%s)
while [ $(( $(date +%s) - start )) -lt "$DEADLINE_S" ]; do
  alive=0; for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
  [ "$alive" = 0 ] && break
  sleep 5
done
for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
echo "runs took $(( $(date +%s) - start )) s (deadline $DEADLINE_S s)"
cd "$RES" && tar -czf "$OUT/results.tgz" --exclude='*/runs' --exclude='*/data' grid paper ./*.log 2>/dev/null
ls grid paper | grep -c json; grep -h "eval " ./*.log | sed 's/, wall.*//' ; tail -n 3 ./*.log | grep -i "error\|Traceback" | head
