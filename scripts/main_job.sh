#!/usr/bin/env bash
# The main job, through the service, on the embedded default: set up (if needed), start the API and
# one CPU worker in the background (SQLite database, server-less filesystem broker, local artifact
# folder, all under runs/service/), submit a real fine-tuning job over REST (SmolLM2-135M-Instruct in
# 4-bit NF4, the default schedule auto: every layer for 4 probe steps, then tail (the top quarter, half,
# ... of the layers in turn) if the probe allows, else every layer; 400 GSM8K training examples, 64 held-out GSM8K test examples), follow its events, download
# the adapter and the selection history, print the result beside full backprop's recorded reference,
# then ask the fine-tuned model and its base one held-out GSM8K question (`lcsb chat`, an inference worker).
# Everything it starts is stopped on exit; each run starts from an empty runs/service/.
set -euo pipefail
cd "$(dirname "$0")/.."
DATA=${LCSB_SHARED_DATA:-../shared/data}
[ -f "$DATA/gsm8k/train.jsonl" ] || { echo "no GSM8K data at $DATA/gsm8k: the job reads ../shared/data beside" \
  "this checkout; set LCSB_SHARED_DATA to the shared data folder (e.g. LCSB_SHARED_DATA=/work/shared/data)" >&2; exit 2; }
[ -x .venv/bin/lcsb ] && .venv/bin/python -c "import lcsb_client, worker, api" 2>/dev/null || bash scripts/setup.sh
SPEC=${LCSB_MAIN_JOB_SPEC:-examples/final_answer_job.yaml}   # another job spec (same data paths) to compare
PORT=${LCSB_PORT:-8765}
export LCSB_DATA_DIR="$PWD/runs/service" LCSB_ENVIRONMENT=development
export LCSB_BASE_URL="http://127.0.0.1:$PORT/v1"
export LCSB_ENQUEUER=worker.enqueue:CeleryEnqueuer LCSB_BROKER_URL=filesystem://
rm -rf runs/service runs/main-job && mkdir -p runs/service runs/data
.venv/bin/lcsb gsm8k-to-chat "$DATA/gsm8k/train.jsonl" runs/data/final_answer_train400.jsonl --limit 400 --task final-answer
.venv/bin/lcsb gsm8k-to-chat "$DATA/gsm8k/test.jsonl" runs/data/final_answer_test64.jsonl --limit 64 --task final-answer

pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true
  [ "${#pids[@]}" -gt 0 ] && echo "stopped the service (API and workers; runs/service/ kept)"
  return 0
}
trap cleanup EXIT
.venv/bin/alembic upgrade head >runs/service/migrate.log 2>&1
export LCSB_API_KEY=$(.venv/bin/python -m lcsb_service.keys create --owner demo | tail -1)
.venv/bin/uvicorn --factory api.main:create_app --host 127.0.0.1 --port "$PORT" >runs/service/api.log 2>&1 &
pids+=($!)
.venv/bin/python -m worker --kind training >runs/service/worker.log 2>&1 &
pids+=($!)
.venv/bin/python -m worker --kind inference >runs/service/inference.log 2>&1 &   # chat (docs/inference.md)
pids+=($!)
.venv/bin/python -m worker --kind export >runs/service/export.log 2>&1 &   # GGUF exports, no torch (docs/export.md)
pids+=($!)
for _ in $(seq 60); do curl -sf "http://127.0.0.1:$PORT/healthz" >/dev/null && break; sleep 1; done
curl -sf "http://127.0.0.1:$PORT/healthz" >/dev/null || { echo "API did not start; see runs/service/api.log"; exit 1; }
echo "service: $LCSB_BASE_URL (API log runs/service/api.log, worker log runs/service/worker.log)"

start=$(date +%s)
job=$(.venv/bin/lcsb jobs submit "$SPEC" --json | .venv/bin/python -c "import json,sys; print(json.load(sys.stdin)['id'])")
echo "job: $job"
(umask 077; printf "%s\n" "$LCSB_API_KEY" > runs/service/api_key)
echo "dashboard: http://127.0.0.1:$PORT/ui/jobs/$job while this runs (sign in with the key in runs/service/api_key)"
.venv/bin/lcsb jobs follow "$job"
.venv/bin/lcsb jobs download "$job" --out runs/main-job --what adapter,selection_history,metrics,plots,summary,eval_samples
.venv/bin/python - "$job" "$start" <<'PY'
import json, subprocess, sys, time
job = json.loads(subprocess.run([".venv/bin/lcsb", "jobs", "get", sys.argv[1], "--json"], check=True,
                                capture_output=True, text=True).stdout)
summary = json.load(open("runs/main-job/summary.json"))
print("\nresult")
print(f"  job              {job['id']}  {job['status']}  ({job.get('fine_tuned_model')})")
print(f"  eval loss        {summary['eval_loss_before']:.4f} -> {summary['eval_loss_after']:.4f} "
      f"(64 held-out GSM8K test examples)")
before, after = summary.get("graded_before") or {}, summary.get("graded_after") or {}
for key, what in (("grader/final_answer", "the answer is exactly the final number (the asked format)"),
                  ("grader/numeric", "the answer's number is the final number, whatever the words around it")):
    if key in after:
        print(f"  {key[7:]:<16} {before.get(key, float('nan')):.1%} (base model) -> {after[key]:.1%} (fine-tuned): "
              f"{what}; 64 held-out examples, greedy on the serving engine (llama.cpp)")
import csv
rows = [r for r in csv.DictReader(open("runs/main-job/metrics.csv")) if r.get("split") == "eval"]
eval_s = sum(float(r["eval_time_s"]) for r in rows if r.get("eval_time_s"))
if rows:
    print(f"  evaluation       {eval_s:.0f} s for {len(rows)} evaluations (eval loss and graded answers), "
          f"{summary['train_seconds'] - eval_s:.0f} s of training")
decided = summary.get("schedule_decision")
depth = ("every layer on every step" if decided and not decided.get("switched")
         else f"k = {summary['k']} of {summary['num_layers']} layers")  # auto at full depth trains all of them
print(f"  steps            {summary['steps']} (schedule {summary['schedule']}, {depth})")
if decided:  # what auto's probe saw and chose (method.lcsb.auto.decision on the job object)
    print(f"  auto             the lower {decided['lower_layers']} layers carried {decided['lower_share']:.1%} of the gradient "
          f"in the first {decided['probe_steps']} steps (threshold {decided['threshold']:.1%}): "
          f"{decided['schedule'] if decided.get('switched') else 'all layers'} from step {decided['from_step']}")
print(f"  time             {summary['train_seconds']:.0f} s in the training process (training and the graded evaluations), "
      f"{time.time() - float(sys.argv[2]):.0f} s submit to download")
print(f"  peak memory      {summary['peak_memory_mib']:.0f} MiB (training process; estimated before the job "
      f"{job['memory_estimate']['total_mib']:.0f} MiB)")
ref = json.load(open("bench/results/main_job/full_reference_summary.json"))
lr = job["hyperparameters"]["learning_rate"]
print(f"  learning rate    {lr:g} (peak; {job['hyperparameters']['warmup_steps']} warmup steps, "
      f"{job['hyperparameters']['lr_schedule']} decay; the measured rule, lcsb_core/training/learning_rate.py)")
same = "the same" if abs(ref["learning_rate"] - lr) <= 1e-12 else f"ANOTHER ({ref['learning_rate']:g})"
ref_acc = (ref.get("graded_after") or {}).get("grader/final_answer")
ref_acc = f", final_answer {ref_acc:.1%}" if ref_acc is not None else ""
print(f"  full backprop    eval loss {ref['eval_loss_after']:.4f}{ref_acc}, peak {ref['peak_memory_mib']:.0f} MiB on this same job "
      f"at {same} learning rate: a recorded reference ({ref['recorded']}; BENCHMARKS.md, 'The README main job'), "
      "not run now")
print("  files            runs/main-job/adapter/ (PEFT), runs/main-job/selection_history.jsonl, "
      "runs/main-job/metrics.csv, runs/main-job/plots/")
PY

# One held-out example to the fine-tuned model and to its base (greedy, streamed by an inference worker)
read -r ft base < <(.venv/bin/lcsb jobs get "$job" --json | .venv/bin/python -c \
  "import json,sys; j=json.load(sys.stdin); print(j['fine_tuned_model'], j['model'])")
question=$(.venv/bin/python -c "import json; print(json.loads(open('runs/data/final_answer_test64.jsonl').readline())['messages'][0]['content'])")
printf '\nheld-out example 1 (GSM8K test, reference answer 18):\n%s\n' "$question"
printf '\nfine-tuned (%s):\n' "$ft"
.venv/bin/lcsb chat "$ft" --message "$question" --temperature 0 --max-tokens 24
printf '\nbase (%s):\n' "$base"
.venv/bin/lcsb chat "$base" --message "$question" --temperature 0 --max-tokens 24
if [ "${LCSB_KEEP_SERVING:-0}" = 1 ]; then   # keep the service up to use the model (README, "After command 1")
  printf '\nserving %s (base_url for the openai client; its api_key is in runs/service/api_key); Ctrl-C stops it\n' \
    "$LCSB_BASE_URL"
  wait
fi
