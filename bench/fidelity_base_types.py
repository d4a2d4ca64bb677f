"""Free-running greedy fidelity of llama.cpp variants of one job against the PEFT reference (fp32), to see
what the serving engine's gap to PEFT comes from (BENCHMARKS.md, "llama.cpp engine"): the shipped 4-bit
base GGUF with the adapter GGUF (what the inference worker serves) against the adapter merged into f16
projections (`merged-f16.gguf` of an export), on the same held-out GSM8K chat prompts as
bench/serving_engines.py.

    python bench/fidelity_base_types.py --adapter runs/main-job/adapter \\
        --variant served="$(lcsb base-gguf SmolLM2-135M-Instruct)"+EXPORT/adapter.gguf \\
        --variant merged-f16=EXPORT/merged-f16.gguf --prompts 20 --new-tokens 64 --json out.json

Each `--variant NAME=MODEL.gguf[+LORA.gguf]`. Prints, per variant, the share of token positions where its
greedy tokens equal PEFT's, and the answers identical throughout.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--adapter", type=Path, required=True, help="the job's PEFT adapter folder (SmolLM2)")
    ap.add_argument("--variant", action="append", required=True, help="NAME=MODEL.gguf[+LORA.gguf]")
    ap.add_argument("--prompts", type=int, default=20)
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()

    import torch
    from llama_cpp import Llama
    from transformers import GenerationConfig

    from bench.serving_engines import _prompts, agreement, peft_greedy
    from lcsb_core.inference import end_tokens
    from lcsb_core.models.catalog import SMOLLM2
    from lcsb_core.models.gguf_import import ensure_model
    from lcsb_core.models.loading import load_tokenizer

    torch.set_num_threads(args.threads)
    model_dir = ensure_model(SMOLLM2.name)
    tokenizer = load_tokenizer(model_dir)
    _, prompts = _prompts(SMOLLM2, tokenizer, args.prompts)
    # the end ids the serving engines stop at (lcsb_core.llama_engine.LlamaEngine)
    end = end_tokens(tokenizer, GenerationConfig.from_pretrained(model_dir, local_files_only=True).eos_token_id)
    refs = peft_greedy(model_dir, args.adapter, prompts, new_tokens=args.new_tokens, end_ids=end)
    result: dict = {"prompts": len(prompts), "new_tokens": args.new_tokens, "variants": {}}
    for spec in args.variant:
        name, files = spec.split("=", 1)
        model, _, lora = files.partition("+")
        llm = Llama(model_path=model, lora_path=lora or None, n_ctx=1024, n_threads=args.threads,
                    n_threads_batch=args.threads, verbose=False, seed=0)
        runs = []
        for prompt in prompts:
            llm.reset()
            mine: list[int] = []
            for token in llm.generate(prompt, temp=0.0, top_k=0, min_p=0.0, top_p=1.0, repeat_penalty=1.0):
                mine.append(int(token))
                if int(token) in end or len(mine) >= args.new_tokens:
                    break
            runs.append(mine)
        share, identical = agreement(refs, runs)
        result["variants"][name] = {"position_agreement": share, "identical_answers": identical}
        print(name, result["variants"][name], flush=True)
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
