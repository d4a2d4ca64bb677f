#!/usr/bin/env bash
# Submit-to-first-step latency of a service job on a warm model cache (BENCHMARKS.md, "Submit to first
# step"). Starts the embedded default like scripts/main_job.sh (SQLite, filesystem broker, one CPU
# worker; under runs/latency-service/), then submits the README main job's spec cut to 2 steps, one job
# after another: a warm-up job, N_RUNS jobs as submitted (step-0 evaluation on), N_RUNS with
# method.eval_at_start=false. For each job it prints, from the events' database timestamps (microseconds;
# the API rounds to seconds), the time from creation to: the worker's claim, the dataset check with the
# tokenizer, "Training started" (model loaded, LoRA and optimizer built), the first optimizer step's start
# and end, and the step-0 evaluation's end (the trainer runs it after the first step) with its loss.
#   bash bench/first_step_latency.sh            # N_RUNS=1 by default; LCSB_WORKER_TORCH_THREADS as for the worker
set -euo pipefail
shopt -s inherit_errexit
cd "$(dirname "$0")/.."
DATA=${LCSB_SHARED_DATA:-../shared/data}
PORT=${LCSB_PORT:-8766}
N_RUNS=${N_RUNS:-1}
export LCSB_DATA_DIR="$PWD/runs/latency-service" LCSB_ENVIRONMENT=development
export LCSB_BASE_URL="http://127.0.0.1:$PORT/v1"
export LCSB_ENQUEUER=worker.enqueue:CeleryEnqueuer LCSB_BROKER_URL=filesystem://
rm -rf runs/latency-service && mkdir -p runs/latency-service runs/data
[ -f runs/data/gsm8k_train400.jsonl ] || .venv/bin/lcsb gsm8k-to-chat "$DATA/gsm8k/train.jsonl" runs/data/gsm8k_train400.jsonl --limit 400
[ -f runs/data/gsm8k_test64.jsonl ] || .venv/bin/lcsb gsm8k-to-chat "$DATA/gsm8k/test.jsonl" runs/data/gsm8k_test64.jsonl --limit 64

pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT
.venv/bin/alembic upgrade head >runs/latency-service/migrate.log 2>&1
export LCSB_API_KEY=$(.venv/bin/python -m lcsb_service.keys create --owner latency | tail -1)
.venv/bin/uvicorn --factory api.main:create_app --host 127.0.0.1 --port "$PORT" >runs/latency-service/api.log 2>&1 &
pids+=($!)
.venv/bin/python -m worker >runs/latency-service/worker.log 2>&1 &
pids+=($!)
for _ in $(seq 60); do curl -sf "http://127.0.0.1:$PORT/healthz" >/dev/null && break; sleep 1; done

submit() {  # extra --set arguments; prints the job id after it ended
  local job
  job=$(.venv/bin/lcsb jobs submit examples/gsm8k_job.yaml --json --set hyperparameters.max_steps=2 \
        --set hyperparameters.warmup_steps=1 \
        --set method.eval_every=0 --set method.save_every=0 "$@" \
        | .venv/bin/python -c "import json,sys; print(json.load(sys.stdin)['id'])")
  .venv/bin/lcsb jobs follow "$job" >/dev/null 2>&1 || true
  echo "$job"
}
warmup=$(submit)
jobs=()
for _ in $(seq "$N_RUNS"); do jobs+=("$(submit)"); done
for _ in $(seq "$N_RUNS"); do jobs+=("$(submit --set method.eval_at_start=false)"); done

.venv/bin/python - "$LCSB_DATA_DIR/lcsb.sqlite3" "$warmup" "${jobs[@]}" <<'PY'
import json, sqlite3, sys
from datetime import datetime

db = sqlite3.connect(sys.argv[1])
t = lambda s: datetime.fromisoformat(s).timestamp()
print(f"{'job':<42}{'eval_at_start':>14}{'claimed':>9}{'data':>7}{'loaded':>8}{'eval 0':>8}{'step 1 start':>13}"
      f"{'step 1 end':>11}{'eval 0 loss':>12}   (seconds after creation)")
for n, job in enumerate(sys.argv[2:]):
    created, cfg, status = db.execute("select created_at, train_config, status from jobs where id = ?", (job,)).fetchone()
    rows = [(t(c), m, json.loads(d) if d else {}) for c, m, d in
            db.execute("select created_at, message, data from job_events where job_id = ? order by seq", (job,))]
    at = lambda prefix: next((c - t(created) for c, m, _ in rows if m.startswith(prefix)), float("nan"))
    step1 = next(((c - t(created), d["step_time_s"]) for c, m, d in rows if d.get("step") == 1 and "train_loss" in d),
                 (float("nan"), 0.0))
    checks = [c - t(created) for c, m, _ in rows if m.startswith("Checked ")]
    loss0 = next((d["valid_loss"] for _, _, d in rows if d.get("step") == 0 and "valid_loss" in d), float("nan"))
    print(f"{job + (' (warm-up)' if n == 0 else ''):<42}{str(json.loads(cfg).get('eval_at_start', True)):>14}"
          f"{at('Fine-tuning job started'):>9.1f}{max(checks, default=float('nan')):>7.1f}{at('Training started'):>8.1f}"
          f"{at('Step 0/'):>8.1f}{step1[0] - step1[1]:>13.1f}{step1[0]:>11.1f}{loss0:>12.4f}   {status}")
PY
