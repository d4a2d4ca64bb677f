"""Measured CPU peaks against `lcsb_core.training.memory`'s estimate for every configuration of
`bench.common.peak_probe.CONFIGS`, unchunked and with the chunked LM head (16 MiB chunks), in each
compute dtype this CPU has: bf16 where it has AVX512-BF16 (`lcsb_core.models.quantization`), and fp32
(forced with `LCSB_CPU_FP32_COMPUTE=1`, the path of a CPU without bf16 units). The data behind the
estimate's coefficients (BENCHMARKS.md, "The chunked LM head"). One fresh process per row; resumable:
rows already in `--out` are kept.

    .venv/bin/python -m bench.memory_fit --out bench/results/memory_fit.json

Prints one line per row: configuration, compute dtype, measured and estimated MiB, their ratio; then a
Markdown table of every row with the estimate of the code as it is now (`--table` prints only that, from
`--out`, measuring nothing: for a coefficient changed after the measurement).
"""

from __future__ import annotations

import argparse
import json
import os
from datetime import UTC, datetime
from pathlib import Path

from bench.common.peak_probe import CONFIGS, config_id, estimate, measure_and_estimate
from bench.common.results import write_result


def bf16_available() -> bool:
    """True when an NF4 base computes in bf16 on this CPU (`lcsb_core.models.quantization.compute_dtype`)."""
    import torch

    from lcsb_core.models.quantization import compute_dtype

    return compute_dtype(torch.device("cpu")) == torch.bfloat16


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("bench/results/memory_fit.json"))
    parser.add_argument("--chunks", default="0,16", help="chunk sizes in MiB, comma-separated (0: unchunked)")
    parser.add_argument("--dtypes", default="auto", help="fp32, bf16 or both comma-separated; auto: every one here")
    parser.add_argument("--table", action="store_true", help="print the table of --out's rows and measure nothing")
    args = parser.parse_args()
    if args.table:
        print(table(json.loads(args.out.read_text())["rows"]))
        return
    started = datetime.now(UTC)
    load_before = list(os.getloadavg())
    dtypes = (["bf16", "fp32"] if bf16_available() else ["fp32"]) if args.dtypes == "auto" else args.dtypes.split(",")
    rows = json.loads(args.out.read_text())["rows"] if args.out.exists() else []
    done = {(r["config"], r["compute_dtype"]) for r in rows}
    for dtype in dtypes:
        env = {"LCSB_CPU_FP32_COMPUTE": "1"} if dtype == "fp32" else {"LCSB_CPU_FP32_COMPUTE": ""}
        for chunk in (int(c) for c in args.chunks.split(",")):
            for spec in CONFIGS:
                spec = {**spec, "chunk_mib": chunk}
                if (config_id(spec), dtype) in done:
                    continue
                result = measure_and_estimate(spec, env=env)
                assert result["compute_dtype"] == dtype, (dtype, result["compute_dtype"])
                est = result["estimate"]
                row = {"config": config_id(spec), "spec": spec, **result,
                       "ratio_estimate_to_peak": round(est["total_mib"] / result["peak_mib"], 3)}
                rows.append(row)
                print(row["config"], dtype, "measured", round(result["peak_mib"]), "estimated",
                      round(est["total_mib"]), "training", round(est["training_mib"]), "ratio",
                      row["ratio_estimate_to_peak"], flush=True)
                write_result(args.out, rows, {"chunks": args.chunks, "dtypes": dtypes}, started=started,
                             load_before=load_before)
    print(table(rows))


def table(rows: list[dict]) -> str:
    """Markdown: per row the measured peak (MiB), the estimate of `lcsb_core.training.memory` as it is now (the rows
    store the one of their run) and their ratio, then per compute dtype the ratios' range and median."""
    import statistics

    out = ["| configuration | compute | measured (MiB) | estimated (MiB) | estimate / peak |", "|---|---|---|---|---|"]
    ratios: dict[str, list[float]] = {}
    for r in rows:
        est = estimate(r["spec"], r["max_backprop_layers"], r["compute_dtype"]).total_mib
        ratios.setdefault(r["compute_dtype"], []).append(est / r["peak_mib"])
        out.append(f"| {r['config']} | {r['compute_dtype']} | {r['peak_mib']:,.0f} | {est:,.0f} | "
                   f"{est / r['peak_mib']:.2f} |")
    for dtype, values in ratios.items():
        out.append(f"\n{dtype}: {len(values)} rows, estimate / peak {min(values):.2f}-{max(values):.2f}, "
                   f"median {statistics.median(values):.2f}")
    return "\n".join(out)


if __name__ == "__main__":
    main()
