"""Batched generation on the serving engine (issue 46): aggregate tokens/s of N sequences that share an
adapter decoded together (`lcsb_core.inference.llama_batch.BatchDecoder`, what graded evaluation runs) against the
same prompts one sequence at a time (what a serving worker does), same threads, side by side in one
process, rounds interleaved. Greedy; the answers are checked equal token for token.

    .venv/bin/python bench/batched_decode.py --model SmolLM2-135M-Instruct --prompts 64 --new-tokens 64 \
        --slots 1 4 16 64 --rounds 2 --out bench/results/batched_decode/smollm2.json

Prompts: the first `--prompts` GSM8K test questions, chat-rendered (the model's template) or, for a model
without one, "Question: ...\\nAnswer:". Rates count generated tokens only; prefill time is included
(`decode_only` reports the decode phase per token as well).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common.paths import DATA
from lcsb_core.inference import SamplingParams
from lcsb_core.inference.llama_engine import LlamaEngine
from lcsb_core.models.gguf_import import ensure_model, serving_gguf


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="SmolLM2-135M-Instruct")
    ap.add_argument("--prompts", type=int, default=64)
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--slots", type=int, nargs="+", default=[1, 4, 16, 64])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    base = ensure_model(args.model)
    gguf = serving_gguf(args.model)
    rows = [json.loads(line) for line in (DATA / "gsm8k" / "test.jsonl").read_text().splitlines()[:args.prompts]]
    engines = {n: LlamaEngine(base, gguf, lora_dir=Path("/tmp/bench-lora"), threads=args.threads, n_ctx=512,
                              slots=n) for n in args.slots}
    one = engines[min(args.slots)]
    template = one.template_of(None)
    prompts = [one.chat_prompt([{"role": "user", "content": r["question"]}], template) if template
               else one.text_prompt(f"Question: {r['question']}\nAnswer:") for r in rows]
    params = SamplingParams(max_new_tokens=args.new_tokens, temperature=0)
    seconds: dict[int, list[float]] = {n: [] for n in args.slots}
    answers: dict[int, list[list[int]]] = {}
    for r in range(args.rounds):
        for n in args.slots:
            t0 = time.perf_counter()
            if n == 1:
                answers[n] = []
                for ids in prompts:
                    run = one.stream(ids, None, params)
                    "".join(run)
                    answers[n].append(run.tokens)
            else:
                answers[n] = engines[n].generate_batch(prompts, None, params)
            seconds[n].append(time.perf_counter() - t0)
            made = sum(len(a) for a in answers[n])
            print(f"round {r}: {n:3d} slots {seconds[n][-1]:7.1f} s  {made / seconds[n][-1]:7.1f} tok/s", flush=True)
    made = sum(len(a) for a in answers[min(args.slots)])
    result = {"model": args.model, "prompts": args.prompts, "new_tokens": args.new_tokens, "threads": args.threads,
              "tokens": made, "prompt_tokens": sum(map(len, prompts)),
              "same_answers": {n: answers[n] == answers[min(args.slots)] for n in args.slots},
              "seconds": seconds,
              "tok_per_s": {n: made / statistics.median(s) for n, s in seconds.items()}}
    base_rate = result["tok_per_s"][min(args.slots)]
    result["ratio_vs_one"] = {n: rate / base_rate for n, rate in result["tok_per_s"].items()}
    print(json.dumps({k: result[k] for k in ("same_answers", "tok_per_s", "ratio_vs_one")}, indent=1))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
