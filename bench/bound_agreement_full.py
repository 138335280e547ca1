"""The fast tier's bound against Nsight Compute's SOL verdict on full-depth models (GPU machine).

    PYTHONPATH=/tmp/site:$PWD python bench/bound_agreement_full.py --out OUT

``bench/bound_calibration.py`` chose the one-pass busy counters on reduced models (a 2-layer
Llama, a depth-2 ViT). This records the whole models, one process each under ``ncu``
(``--clock-control none``), with the SpeedOfLight section and the fast set in one report:

* ``gpt2_full_sol``: Hugging Face GPT-2 small (12 layers), bf16 forward, batch 4, seq 1024;
* ``vit_full_sol``: timm ViT-S/16 (depth 12), bf16 autocast, fused AdamW, batch 64: one
  training step (the third).

For each it prints and writes (``agreement.json``) the share of kernels and of GPU time on
which the fast tier's estimate (SOL columns dropped) names the bound ncu's rule names, and
keeps the reports stripped of code modules and xz-compressed for the CPU tests.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from profile_engine import VIT_TEMPLATE  # bench/ is on the path of a bench script

ROOT = Path(__file__).resolve().parents[1]
NCU = os.environ.get("TORCH_NSIGHT_NCU", "/usr/local/cuda/bin/ncu")
SOL_ONLY = ["sol_bottleneck", "sm_pct", "mem_pct"]

GPT2_APP = r"""
import torch, torch_nsight
from transformers import GPT2Config, GPT2LMHeadModel
model = GPT2LMHeadModel(GPT2Config()).cuda().to(torch.bfloat16).eval()
torch_nsight.instrument(model)
ids = torch.randint(0, 50257, (4, 1024), device="cuda")
with torch.no_grad():
    for _ in range(3):
        with torch_nsight.step():
            model(input_ids=ids)
torch.cuda.synchronize()
"""

VIT_APP = VIT_TEMPLATE % {"depth": 12}  # run with argv[1] = 3 steps


def record(name: str, app: str, app_args: list[str], out: Path) -> Path | None:
    from torch_nsight.collect.shared import ncu as ncu_cli
    from torch_nsight.metrics import METRIC_SETS

    metrics = ncu_cli.filter_metrics(METRIC_SETS["fast"].metrics, ncu_cli.known_metric_bases(NCU))
    report = out / f"{name}.ncu-rep"
    cmd = [NCU, "--clock-control", "none", "--target-processes", "application-only",
           "--nvtx", "--nvtx-include", "torch_nsight@measure", "--section", "SpeedOfLight",
           "--metrics", ",".join(metrics), "-f", "-o",
           str(report.with_suffix("")), sys.executable, "-c", app, *app_args]
    started = time.time()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=420,
                          env={**os.environ, "TORCH_NSIGHT_STEPS": "2"})
    text = proc.stdout + proc.stderr
    print(name, f"{time.time() - started:.0f}s", text.count("==PROF== Profiling"), "kernels",
          "" if report.exists() else text[-1500:], flush=True)
    return report if report.exists() else None


def agreement(report: Path) -> dict:
    import torch_nsight
    from torch_nsight.analyze.classify import classify

    k = torch_nsight.load(report, cache=False).kernels
    ncu_rule = k["basis"] == "ncu_rule"
    estimated = classify(k.drop(columns=SOL_ONLY))
    same = (estimated["bound"] == k["bound"]) & ncu_rule
    time_ns = k["duration_ns"]
    disagree = (k.loc[~same & ncu_rule]
                .assign(estimate=estimated.loc[~same & ncu_rule, "bound"])
                .groupby(["kernel", "bound", "estimate"])["duration_ns"].sum()
                .sort_values(ascending=False).head(8))
    return {"kernels": len(k), "ncu_rule_kernels": int(ncu_rule.sum()),
            "kernel_share": round(float(same.sum() / ncu_rule.sum()), 4),
            "time_share": round(float(time_ns[same].sum() / time_ns[ncu_rule].sum()), 4),
            "ncu_bounds": k["bound"].value_counts().to_dict(),
            "largest_disagreements_ns": {" | ".join(map(str, key)): float(v)
                                         for key, v in disagree.items()}}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    results = {}
    for name, app, app_args in (("gpt2_full_sol", GPT2_APP, []),
                                ("vit_full_sol", VIT_APP, ["3"])):
        report = record(name, app, app_args, args.out)
        if report is None:
            continue
        results[name] = agreement(report)
        print(name, json.dumps(results[name], indent=1), flush=True)
        stripped = args.out / f"{name}.stripped.ncu-rep"
        subprocess.run([sys.executable, str(ROOT / "tests/data/strip_code_modules.py"), str(report),
                        str(stripped)], check=False)
        keep = stripped if stripped.exists() else report
        subprocess.run(["xz", "-T8", "-9", str(keep)], check=False)
    (args.out / "agreement.json").write_text(json.dumps(results, indent=1))
    for path in args.out.glob("*.ncu-rep"):
        path.unlink()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
