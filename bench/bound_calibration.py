"""Which one-pass counters decide the bound as Nsight Compute's SOL verdict does (GPU machine).

    PYTHONPATH=/tmp/site:$PWD:$NCU_PY python bench/bound_calibration.py --out OUT

Three experiments, one process each under ``ncu`` (``--clock-control none``):

1. **NVTX message size**: start/end ranges of our domain whose messages are 1 kB to 4 MB long,
   each around one small kernel; which lengths the report keeps (shapes travel in a message).
2. **Passes per metric**: ncu prints the replay passes a kernel took (``- N passes``). For the
   fast set, then the fast set plus each sub-metric of the two SOL throughputs (from
   ``breakdown:``), the passes on one small kernel.
3. **Calibration reports**: a Hugging Face Llama forward (2 layers) and a timm ViT-S/16 bf16
   AdamW training step (depth 2), each with the SpeedOfLight section, both SOL breakdowns and
   the fast set, for the rule fitted on the CPU (``bench/bound_agreement.py``).

Writes ``passes.json``, ``nvtx_sizes.json`` and the xz-compressed reports under OUT.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

from profile_engine import VIT_TEMPLATE  # bench/ is on the path of a bench script

NCU = os.environ.get("TORCH_NSIGHT_NCU", "/usr/local/cuda/bin/ncu")
PASSES_RE = re.compile(r"==PROF== Profiling \"([^\"]+)\".*- (\d+) pass")
BREAKDOWNS = ("breakdown:sm__throughput.avg.pct_of_peak_sustained_elapsed",
              "breakdown:gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed")

TINY_APP = r"""
import sys, torch, nvtx
x = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
torch.cuda.synchronize()
sizes = [int(s) for s in sys.argv[1:]]
for size in sizes or [0]:
    handle = nvtx.start_range("calls:" + "x" * size, domain="torch_nsight_probe") if sizes else None
    y = x @ x
    z = (x * 2).sum()
    if handle is not None:
        nvtx.end_range(handle)
torch.cuda.synchronize()
"""

LLAMA_APP = r"""
import torch, torch_nsight
from transformers import LlamaConfig, LlamaForCausalLM
config = LlamaConfig(hidden_size=1024, intermediate_size=2816, num_hidden_layers=2,
                     num_attention_heads=16, num_key_value_heads=16, vocab_size=32000)
model = LlamaForCausalLM(config).cuda().to(torch.bfloat16).eval()
torch_nsight.instrument(model, enabled=True)
ids = torch.randint(0, 32000, (2, 1024), device="cuda")
with torch.no_grad():
    for _ in range(3):
        with torch_nsight.step():
            model(input_ids=ids)
torch.cuda.synchronize()
"""

VIT_APP = VIT_TEMPLATE % {"depth": 2}  # run with argv[1] = 4 steps

FAST = ("gpu__time_duration.sum", "dram__bytes.sum", "sm__cycles_elapsed.avg.per_second",
        "dram__cycles_elapsed.avg.per_second")


def ncu(args: list[str], app: str, app_args: list[str], env: dict | None = None) -> str:
    cmd = [NCU, "--clock-control", "none", "--target-processes", "application-only", *args,
           sys.executable, "-c", app, *app_args]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=280)
    return proc.stdout + proc.stderr


def passes(output: str) -> dict[str, int]:
    return {m.group(1): int(m.group(2)) for m in PASSES_RE.finditer(output)}


#: One-counter signals of a busy SM and a busy memory hierarchy (sub-metrics of the two SOL
#: throughputs, read from a ``breakdown:`` report on the H200).
CANDIDATES = {
    "sm_issue": ("sm__inst_executed", "sm__issue_active"),
    "sm_pipes": ("sm__pipe_alu_cycles_active", "sm__pipe_fma_cycles_active",
                 "sm__pipe_tensor_cycles_active", "sm__inst_executed_pipe_lsu"),
    "l1": ("l1tex__data_pipe_lsu_wavefronts", "l1tex__lsu_writeback_active"),
    "l2": ("lts__t_sectors", "lts__lts2xbar_cycles_active"),
    "dram": ("dram__cycles_active",),
}


def nvtx_sizes(out: Path) -> None:
    sizes = [1000, 100_000, 1_000_000, 4_000_000]
    report = out / "nvtx.ncu-rep"
    text = ncu(["--nvtx", "--metrics", "gpu__time_duration.sum", "-f", "-o",
                str(report.with_suffix(""))], TINY_APP, [str(s) for s in sizes])
    import ncu_report

    kept = []
    ctx = ncu_report.load_report(str(report))
    rng = ctx.range_by_idx(0)
    for i in range(rng.num_actions()):
        action = rng.action_by_idx(i)
        state = action.nvtx_state()
        for domain_id in state.domains():
            domain = state.domain_by_id(domain_id)
            for r in domain.start_end_ranges():
                kept.append({"kernel": action.name(), "domain": domain.name(),
                             "length": len(r) if isinstance(r, str) else len(r.name())})
    (out / "nvtx_sizes.json").write_text(json.dumps({"asked": sizes, "kept": kept,
                                                     "tail": text[-1500:]}, indent=1))


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--skip-models", action="store_true")
    parser.add_argument("--skip-nvtx", action="store_true")
    args = parser.parse_args()
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    started = time.time()

    # 1. NVTX message sizes
    if not args.skip_nvtx:
        nvtx_sizes(out)
        print(f"nvtx {time.time() - started:.0f}s", flush=True)

    # 2. passes: the fast set alone, with each group of candidates, with all of them
    result = {}
    groups = {"fast": ()} | {name: tuple(f"{m}.avg.pct_of_peak_sustained_elapsed" for m in names)
                             for name, names in CANDIDATES.items()}
    groups["all"] = tuple(m for names in list(groups.values())[1:] for m in names)
    for name, extra in groups.items():
        result[name] = passes(ncu(["--metrics", ",".join((*FAST, *extra))], TINY_APP, []))
        print(name, result[name], flush=True)
    (out / "passes.json").write_text(json.dumps(result, indent=1))
    if args.skip_models:
        return 0

    # 3. calibration reports
    env = {**os.environ, "TORCH_NSIGHT_STEPS": "2"}
    metrics = ",".join((*FAST, *BREAKDOWNS, *groups["all"], "launch__waves_per_multiprocessor",
                        "launch__grid_size", "launch__block_size"))
    for name, app in (("llama_sol", LLAMA_APP), ("vit_sol", VIT_APP)):
        report = out / f"{name}.ncu-rep"
        t0 = time.time()
        text = ncu(["--nvtx", "--nvtx-include", "torch_nsight@measure", "--section",
                    "SpeedOfLight", "--metrics", metrics, "-f", "-o",
                    str(report.with_suffix(""))], app, ["4"] if app is VIT_APP else [], env=env)
        print(name, f"{time.time() - t0:.0f}s", text.count("==PROF== Profiling"), "kernels",
              text[-800:] if not report.exists() else "", flush=True)
        if report.exists():
            subprocess.run([sys.executable, "tests/data/strip_code_modules.py", str(report),
                            str(out / f"{name}.stripped.ncu-rep")], check=False)
            stripped = out / f"{name}.stripped.ncu-rep"
            keep = stripped if stripped.exists() else report
            subprocess.run(["xz", "-T8", "-9", "-k", str(keep)], check=False)
    for path in out.glob("*.ncu-rep"):
        path.unlink()
    print(f"done {time.time() - started:.0f}s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
