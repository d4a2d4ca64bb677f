"""How far greedy decoding agrees with itself when only the rounding changes: the noise floor of issue 32's
free-running fidelity measure (BENCHMARKS.md, "llama.cpp engine").

Per catalog model, a short real job trained here exactly as bench/serving_engines.py trains its own
(`bench.export_gguf.train`: GSM8K, LoRA r16 alpha 32 on the seven projections, fp32, `--steps` steps), then
its PEFT reference (the imported checkpoint in fp32, adapter unmerged, 1 torch thread: what
bench/serving_engines.py compares the served answers with) against the same library, the same weights and
the same prompts with one thing changed:

- `threads-2`: 2 torch threads instead of 1 (matrix products reduce in another order);
- `merged-fp32`: the adapter merged into the fp32 projections (`merge_and_unload`: W + B A scaled, once);
- `bf16`: the model in bf16, adapter unmerged.

Reported per variant, as bench/serving_engines.py reports the served engine: the share of the reference's
token positions where the variant's greedy token is the same (free-running: after a divergence a position
counts only if it agrees anyway) and the answers identical throughout; 20 held-out GSM8K prompts x 64
new tokens, the end ids the serving engines stop at.

    python bench/fidelity_noise_floor.py --models smollm2,gemma --json bench/results/fidelity_noise_floor.json
"""

from __future__ import annotations

import argparse
import copy
import os
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common.results import write_result


def greedy(model, prompts: list[list[int]], new_tokens: int, end_ids: list[int]) -> list[list[int]]:
    """Greedy `new_tokens` new ids per prompt (an end id included when made) of a transformers model."""
    import torch

    out = []
    for prompt in prompts:
        ids = torch.tensor([prompt])
        with torch.no_grad():
            made = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=new_tokens,
                                  do_sample=False, eos_token_id=end_ids)
        out.append(made[0, len(prompt):].tolist())
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="smollm2,gemma")
    ap.add_argument("--steps", type=int, default=20, help="the job's steps (bench/serving_engines.py: 20)")
    ap.add_argument("--prompts", type=int, default=20)
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    started, load_before = datetime.now(UTC), list(os.getloadavg())

    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, GenerationConfig

    from bench.export_gguf import train
    from bench.serving_engines import _prompts, agreement
    from lcsb_core.inference import end_tokens
    from lcsb_core.models.catalog import GEMMA3_270M, SMOLLM2
    from lcsb_core.models.gguf_import import ensure_model
    from lcsb_core.models.loading import load_tokenizer

    result: dict = {"prompts": args.prompts, "new_tokens": args.new_tokens, "steps": args.steps, "models": {}}
    with tempfile.TemporaryDirectory(prefix="fidelity-floor-") as tmp:
        for key in args.models.split(","):
            entry = SMOLLM2 if key == "smollm2" else GEMMA3_270M
            model_dir = ensure_model(entry.name)
            tokenizer = load_tokenizer(model_dir)
            examples, prompts = _prompts(entry, tokenizer, args.prompts)
            adapter = train(Path(tmp) / key, entry.name, examples, args.steps) / "adapter"
            end = sorted(end_tokens(tokenizer, GenerationConfig.from_pretrained(model_dir,
                                                                                 local_files_only=True).eos_token_id))

            def peft(dtype: torch.dtype, model_dir: Path = model_dir, adapter: Path = adapter):
                base = AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype, local_files_only=True)
                return PeftModel.from_pretrained(base, str(adapter)).eval()

            torch.set_num_threads(1)
            reference = peft(torch.float32)
            refs = greedy(reference, prompts, args.new_tokens, end)
            variants: dict[str, list[list[int]]] = {}
            torch.set_num_threads(2)
            variants["threads-2"] = greedy(reference, prompts, args.new_tokens, end)
            torch.set_num_threads(1)
            variants["merged-fp32"] = greedy(copy.deepcopy(reference).merge_and_unload(), prompts, args.new_tokens, end)
            del reference
            variants["bf16"] = greedy(peft(torch.bfloat16), prompts, args.new_tokens, end)
            part = {}
            for name, runs in variants.items():
                share, identical = agreement(refs, runs)
                part[name] = {"position_agreement": share, "identical_answers": identical}
                print(entry.name, name, part[name], flush=True)
            result["models"][entry.name] = part
    if args.json:
        write_result(args.json, result, vars(args) | {"json": str(args.json)}, started=started,
                     load_before=load_before, command=sys.argv)


if __name__ == "__main__":
    main()
