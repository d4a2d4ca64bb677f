"""GGUF export (issue 33, BENCHMARKS.md "GGUF export"): per model, a short real job trained here, then
(a) the export's wall time and peak memory for all formats, each in a fresh process (`lcsb export`'s code,
`lcsb_core.export.run.export_run`), and (b) the fidelity table: each format loaded in llama.cpp
(llama-cpp-python) against the PEFT model on greedy continuations (`lcsb_core.export.fidelity.measure`:
top-1 agreement, share of the adapter's change of the log-probabilities kept, its relative error).

    python bench/export_gguf.py --prompts 20 --new-tokens 64 --out bench/results/export_gguf.json
    python bench/export_gguf.py --models smollm2 --prompts 2 --new-tokens 8 --steps 2 --out /tmp/smoke.json  # smoke
    python bench/export_gguf.py --timing-only --out /tmp/export_timing.json   # time and memory only, no training

Jobs: chat GSM8K on SmolLM2-135M-Instruct, prompt/completion GSM8K on gemma-3-270m; plain LoRA r16 alpha 32
on the seven projections of every layer (the service's defaults), fp32 base, lr 1e-3, batch 4, 128 tokens.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path

from bench.common.paths import DATA as SHARED_DATA
from bench.common.paths import ROOT
from bench.common.results import write_result

DATA = SHARED_DATA / "gsm8k"
ALL_FORMATS = ["adapter", "merged-f16", "merged-q8_0", "merged-q4_1"]
DEFAULT_FORMATS = ALL_FORMATS[:3]
EXPORT_CHILD = """
import json, os, sys, time
from pathlib import Path
from lcsb_core.export.run import export_run
def status(key):
    return next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith(key + ":"))
start, cpu = time.perf_counter(), os.times()
result = export_run(Path(sys.argv[1]), Path(sys.argv[2]), formats=json.loads(sys.argv[3]))
end = os.times()
print(json.dumps({"seconds": round(time.perf_counter() - start, 2),
                  "cpu_seconds": round(end.user - cpu.user + end.system - cpu.system, 2),
                  "peak_rss_mib": round(status("VmHWM") / 1024, 1),
                  "bytes": {f: p.stat().st_size for f, p in result.files.items()},
                  "manifest_files": result.manifest["files"]}))
"""


def rows(split: str, start: int, count: int) -> list[dict]:
    return [json.loads(r) for r in (DATA / f"{split}.jsonl").read_text().splitlines()[start:start + count]]


def train(tmp: Path, model: str, examples: list[dict], steps: int) -> Path:
    from lcsb_core.training.config import TrainConfig
    from lcsb_core.training.trainer import Trainer

    tmp.mkdir(parents=True, exist_ok=True)
    (tmp / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in examples))
    cfg = TrainConfig.from_dict({
        "data": {"train_file": str(tmp / "train.jsonl"), "max_seq_len": 128},
        "model": {"name_or_path": model, "quantization": "fp32", "device": "cpu"},
        "lcsb": {"schedule": "full"}, "optim": {"learning_rate": 1e-3, "warmup_steps": 1, "lr_schedule": "constant"},
        "batch_size": 4, "max_steps": steps, "eval_every": 0, "seed": 0, "output_dir": str(tmp / "run"),
    })
    Trainer(cfg).train()
    return tmp / "run"


def export_in_child(run: Path, out: Path, formats: list[str]) -> dict:
    """`export_run` in a fresh process: wall and CPU (user + sys) seconds, and peak RSS as the child's
    `VmHWM` (/proc/self/status; memory-mapped pages included). Not `getrusage`'s `ru_maxrss`: Linux
    carries the parent's peak over fork and exec into it, so every child reported this script's peak
    after training (3,657 MiB for Gemma, before 2026-12-04's fix)."""
    done = subprocess.run([sys.executable, "-c", EXPORT_CHILD, str(run), str(out), json.dumps(formats)],
                          cwd=ROOT, check=True, capture_output=True, text=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def random_run(tmp: Path, name: str) -> Path:
    """A run folder with a random PEFT adapter shaped like the benchmark job's (r16 alpha 32, the seven
    projections of every layer; B ~ 0.002 x A ~ 0.02, a short job's size) for `--timing-only`: the
    converters' time and memory do not depend on the values. Reads the imported model's config.json."""
    import numpy as np
    from safetensors.numpy import save_file

    from lcsb_core.models.gguf_import import ensure_model

    cfg = json.loads((ensure_model(name) / "config.json").read_text())
    hidden, ffn = cfg["hidden_size"], cfg["intermediate_size"]
    head_dim = cfg.get("head_dim") or hidden // cfg["num_attention_heads"]
    q, kv = cfg["num_attention_heads"] * head_dim, cfg["num_key_value_heads"] * head_dim
    shapes = {"self_attn.q_proj": (q, hidden), "self_attn.k_proj": (kv, hidden), "self_attn.v_proj": (kv, hidden),
              "self_attn.o_proj": (hidden, q), "mlp.gate_proj": (ffn, hidden), "mlp.up_proj": (ffn, hidden),
              "mlp.down_proj": (hidden, ffn)}
    rng = np.random.default_rng(0)
    tensors = {}
    for i in range(cfg["num_hidden_layers"]):
        for module, (out_dim, in_dim) in shapes.items():
            prefix = f"base_model.model.model.layers.{i}.{module}"
            tensors[prefix + ".lora_A.weight"] = rng.normal(0, 0.02, (16, in_dim)).astype(np.float32)
            tensors[prefix + ".lora_B.weight"] = rng.normal(0, 0.002, (out_dim, 16)).astype(np.float32)
    run = tmp / name / "run"
    (run / "adapter").mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(run / "adapter" / "adapter_model.safetensors"))
    (run / "adapter" / "adapter_config.json").write_text(json.dumps({
        "peft_type": "LORA", "r": 16, "lora_alpha": 32, "target_modules": [m.split(".")[1] for m in shapes],
        "bias": "none", "use_dora": False, "use_rslora": False, "alpha_pattern": {}, "rank_pattern": {},
        "modules_to_save": None, "fan_in_fan_out": False}))
    (tmp / name / "train.jsonl").write_text(json.dumps({"prompt": "Q", "completion": " A"}) + "\n")
    (run / "config.json").write_text(json.dumps({"model": {"name_or_path": name},
                                                 "data": {"train_file": str(tmp / name / "train.jsonl")}}))
    return run


def bench_timing(key: str, tmp: Path) -> dict:
    """`--timing-only`: the default formats and all four, each in a fresh process, on a random adapter."""
    from lcsb_core.models.catalog import GEMMA3_270M, SMOLLM2

    entry = SMOLLM2 if key == "smollm2" else GEMMA3_270M
    run = random_run(tmp, entry.name)
    timing = {"default": export_in_child(run, tmp / key / "default", DEFAULT_FORMATS),
              "all": export_in_child(run, tmp / key / "all", ALL_FORMATS)}
    for t in timing.values():
        t.pop("manifest_files")
    return {"model": entry.name, "adapter": "random r16, seven projections", "timing": timing}


def bench_model(key: str, tmp: Path, args) -> dict:
    from lcsb_core.data import gsm8k_to_chat
    from lcsb_core.export.fidelity import measure
    from lcsb_core.models.catalog import GEMMA3_270M, SMOLLM2
    from lcsb_core.models.gguf_import import ensure_model, shipped_gguf_path
    from lcsb_core.models.loading import load_tokenizer

    entry = SMOLLM2 if key == "smollm2" else GEMMA3_270M
    tokenizer = load_tokenizer(ensure_model(entry.name))
    if entry is SMOLLM2:
        examples = [gsm8k_to_chat(r) for r in rows("train", 0, 4 * args.steps)]
        texts = [tokenizer.apply_chat_template([{"role": "user", "content": r["question"]}], tokenize=False,
                                               add_generation_prompt=True) for r in rows("test", 0, args.prompts)]
        prompts = [tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts]
    else:
        examples = [{"prompt": f"Question: {r['question']}\nAnswer:", "completion": " " + r["answer"]}
                    for r in rows("train", 0, 4 * args.steps)]
        prompts = [[tokenizer.bos_token_id] + tokenizer(f"Question: {r['question']}\nAnswer:",
                                                        add_special_tokens=False)["input_ids"]
                   for r in rows("test", 0, args.prompts)]
    run = train(tmp / key, entry.name, examples, args.steps)
    timing = {"all": export_in_child(run, tmp / key / "all", ALL_FORMATS)}
    for fmt in ALL_FORMATS:
        timing[fmt] = export_in_child(run, tmp / key / fmt, [fmt])
    out = tmp / key / "all"
    base = shipped_gguf_path(entry, assemble_dir=tmp / key)
    variants = {"adapter": (base, out / "adapter.gguf"),
                **{f: (out / f"{f}.gguf", None) for f in ALL_FORMATS if f != "adapter"}}
    fidelity = measure(ensure_model(entry.name), run / "adapter", prompts, new_tokens=args.new_tokens,
                       variants=variants, base_gguf=base)
    return {"model": entry.name, "timing": timing, "fidelity": {k: v.to_dict() for k, v in fidelity.items()},
            "weight_fidelity": timing["all"]["manifest_files"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="smollm2,gemma")
    ap.add_argument("--prompts", type=int, default=20)
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--timing-only", action="store_true",
                    help="no training and no fidelity: time and peak memory on a random adapter")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "export_gguf.json")
    args = ap.parse_args()
    started = datetime.now(UTC)
    results = []
    with tempfile.TemporaryDirectory(prefix="export-bench-") as tmp:
        for key in args.models.split(","):
            if args.timing_only:
                results.append(bench_timing(key, Path(tmp)))
                print(json.dumps(results[-1]), flush=True)
                continue
            results.append(bench_model(key, Path(tmp), args))
            print(json.dumps(results[-1]["timing"]["all"] | {"fidelity": results[-1]["fidelity"]}), flush=True)
    write_result(args.out, {"models": results}, vars(args) | {"out": str(args.out)}, started=started)
    print(args.out)


if __name__ == "__main__":
    main()
