#!/usr/bin/env bash
# The GPU path, on a lent CUDA machine (run through the device tool, never by CI):
#   1. one small job through the service on a GPU worker class (embedded default: SQLite, filesystem
#      broker, local storage; API + one `cuda` worker; submitted, followed and downloaded with `lcsb`);
#   2. bench/step_time.py --device cuda on the four on-device shapes (random weights, rows interleaved).
#
# Prepared here (ignored by git, carried to the device machine):
#   .whl/            wheels of what the machine's Python lacks (bitsandbytes, the service's packages)
#   .dev/smollm2/    SmolLM2-135M-Instruct's config.json, tokenizer and chat template (no weights)
#   .dev/data/       GSM8K chat files (scripts/main_job.sh's conversion, smaller)
# The real weights (270 MB; the GGUF 98 MB) do not fit a 64 MiB transfer, so step 1 trains a
# random-weight model of SmolLM2's exact config (seed 0): it checks the path (NF4 on CUDA, the GPU
# worker class, memory cap, artifacts), not quality.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-runs/gpu-check}
mkdir -p "$OUT"
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    || { echo "wheel install failed"; exit 1; }
  export PYTHONPATH=/tmp/site:$PWD
else
  export PYTHONPATH=$PWD
fi
export PYTHONUNBUFFERED=1 LCSB_MODEL_CACHE=/tmp/lcsb-models
lcsb() { python3 -m lcsb_client.main "$@"; }
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
  python3 -c "import torch, bitsandbytes, transformers, peft; print('torch', torch.__version__, 'cuda', torch.version.cuda,
'bitsandbytes', bitsandbytes.__version__, 'transformers', transformers.__version__, 'peft', peft.__version__)"
} 2>&1 | tee "$OUT/env.txt"

# --- 1. a job through the service on a GPU worker class ---------------------------------------------
job_check() {
  python3 - <<'PY' || return 1
import gzip, shutil, torch
from pathlib import Path
from transformers import AutoConfig, AutoModelForCausalLM
src, out = Path(".dev/smollm2"), Path("/tmp/lcsb-models/SmolLM2-135M-Instruct")
out.mkdir(parents=True, exist_ok=True)
torch.manual_seed(0)
model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(src)).to(torch.bfloat16)
model.save_pretrained(out)
for f in src.iterdir():
    if f.suffix == ".gz":
        (out / f.stem).write_bytes(gzip.decompress(f.read_bytes()))
    elif f.name != "config.json":
        shutil.copy(f, out / f.name)
print("random-weight model:", sorted(p.name for p in out.iterdir()))
PY
  export LCSB_DATA_DIR=/tmp/lcsb-service LCSB_ENVIRONMENT=development LCSB_BASE_URL=http://127.0.0.1:8765/v1
  export LCSB_ENQUEUER=worker.enqueue:CeleryEnqueuer LCSB_BROKER_URL=filesystem://
  export LCSB_WORKER_CLASSES='[{"queue": "gpu-40g", "memory_mib": 40960, "device": "cuda"}]' LCSB_WORKER_QUEUE=gpu-40g
  rm -rf "$LCSB_DATA_DIR"; mkdir -p "$LCSB_DATA_DIR"
  python3 -m alembic upgrade head >"$LCSB_DATA_DIR/migrate.log" 2>&1 || { cat "$LCSB_DATA_DIR/migrate.log"; return 1; }
  LCSB_API_KEY=$(python3 -m lcsb_service.keys create --owner gpu | tail -1); export LCSB_API_KEY
  python3 -m uvicorn --factory api.main:create_app --host 127.0.0.1 --port 8765 >"$LCSB_DATA_DIR/api.log" 2>&1 &
  local api=$!
  python3 -m worker --kind training >"$LCSB_DATA_DIR/worker.log" 2>&1 &
  local wk=$!
  for _ in $(seq 60); do curl -sf http://127.0.0.1:8765/healthz >/dev/null && break; sleep 1; done
  local job
  job=$(lcsb jobs submit .dev/gpu_job.yaml --json | python3 -c "import json,sys; print(json.load(sys.stdin)['id'])")
  echo "job: $job"
  timeout 240 python3 -m lcsb_client.main jobs follow "$job"
  lcsb jobs get "$job" --json
  lcsb jobs download "$job" --out /tmp/gpu-job --what metrics,summary && cp /tmp/gpu-job/summary.json "$OUT/job_summary.json"
  kill $api $wk; wait $api $wk 2>/dev/null
  tail -40 "$LCSB_DATA_DIR/worker.log"; tail -15 "$LCSB_DATA_DIR/api.log"
}
job_check >"$OUT/job.log" 2>&1
echo "job check: rc=$?"; tail -25 "$OUT/job.log"

# --- 2. step time of the four on-device shapes -----------------------------------------------------
timeout "${STEP_TIME_LIMIT_S:-300}" python3 bench/step_time.py --device cuda \
  --shapes smollm2-135m,qwen2.5-0.5b,llama-3.2-1b,qwen2.5-3b --seq 512 --quant nf4,bf16 \
  --schedules full,freeze,cyclic,top,topfull/4 --fractions 0.25 --warmup-rounds 1 --rounds 3 \
  --json "$OUT/gpu_step_time.json" >"$OUT/step_time.md" 2>"$OUT/step_time.err"
echo "step time: rc=$?"; cat "$OUT/step_time.md"; tail -5 "$OUT/step_time.err"
