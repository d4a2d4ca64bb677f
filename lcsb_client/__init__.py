"""Command-line client of the LCSB fine-tuning service (`lcsb files ...`, `lcsb jobs ...`).

    lcsb files upload train.jsonl
    lcsb jobs submit job.yaml --follow
    lcsb jobs follow ftjob-...                 # progress bar from the job's event stream
    lcsb jobs download ftjob-... --out out/    # adapter/ (PEFT), selection history, metrics, plots

The service is reached at `--base-url` / `LCSB_BASE_URL` (default http://127.0.0.1:8000/v1) with the
key `--api-key` / `LCSB_API_KEY`. Files, jobs, events and cancel go through the official `openai`
client; this service's extensions (event stream, checkpoints' adapters, artifacts) through httpx.
Nothing here imports torch or the service's own packages: the client talks HTTP only.
"""
