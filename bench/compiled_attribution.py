"""Attribution of compiled models on the GPU machine: how much GPU time lands in modules.

    PYTHONPATH=/tmp/site:$PWD python bench/compiled_attribution.py --out OUT

A timm ViT-S/16 training loop (bs 64, bf16 autocast, fused AdamW, ``instrument(model)``,
``torch_nsight.step()`` marks), compiled four ways: the whole model (``torch.compile``),
``fullgraph=True``, each block in place (``block.compile()``) and
``mode="reduce-overhead"`` (CUDA graphs). Each is profiled as a user would, whole process
timed from outside:

* ``torch-nsight profile --steps 5:6`` (ncu, the default fast set);
* ``torch-nsight profile --timeline --steps 5:7`` (PyTorch's profiler).

Also a Hugging Face GPT-2 forward compiled through ``torch_nsight.sweep``. Writes
``summary.json`` (coverage, forward/backward split, fused kernels, unattributed kernel
names, wall times) and keeps the reports named in ``KEEP`` (xz, code modules stripped).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

#: How each part compiles the ViT training script of ``profile_engine.py`` (instrumented first).
COMPILE = {
    "whole": "model = torch.compile(model)",
    "flops": "model = torch.compile(model)",  # the same, kept as the fixture with FLOPs
    "fullgraph": "model = torch.compile(model, fullgraph=True)",
    "block": "for block in model.blocks:\n    block.compile()",
    "reduce": 'model = torch.compile(model, mode="reduce-overhead")',
}


def vit_script(mode: str, depth: int) -> str:
    """The ViT training script (``argv[1]`` steps), compiled as ``mode`` says."""
    from profile_engine import VIT_TEMPLATE

    marker = "torch_nsight.instrument(model)\n"
    return VIT_TEMPLATE.replace(marker, marker + COMPILE[mode] + "\n") % {"depth": depth}


GRAPH = r'''
import torch, torch_nsight
# a hand-captured CUDA graph: module ranges run at capture, not at replay
model = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.GELU(),
                            torch.nn.Linear(4096, 1024)).cuda()
torch_nsight.instrument(model)
x = torch.randn(256, 1024, device="cuda")
with torch.no_grad():
    for _ in range(3):
        model(x)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y = model(x)
    for _ in range(8):
        with torch_nsight.step():
            graph.replay()
            model(x)  # one eager forward beside it
torch.cuda.synchronize()
'''

SWEEP = r'''
import sys, json, torch, torch_nsight
from transformers import GPT2Config, GPT2LMHeadModel
def factory():
    return torch.compile(GPT2LMHeadModel(GPT2Config(n_layer=4)).eval())
def make_inputs(shape):
    return {"input_ids": torch.randint(0, 50257, tuple(shape))}
result = torch_nsight.sweep(factory, [(4, 256)], make_inputs=make_inputs, dtype="bf16",
                            output_dir=sys.argv[1], timeout=240)
print("SWEEP", json.dumps({"coverage": result.coverage, "kernels": len(result.kernels)}))
'''

KEEP = {"ncu_whole": "compile_vit_train.ncu-rep",
        "ncu_flops": "compile_vit_train_flops.ncu-rep", "timeline_whole": "compile_vit_timeline",
        "ncu_reduce": "compile_reduce_overhead.ncu-rep",
        "timeline_reduce": "compile_reduce_overhead_timeline",
        "timeline_graph": "graph_captured_timeline"}
NCU = os.environ.get("TORCH_NSIGHT_NCU", "/usr/local/cuda/bin/ncu")


def timed(cmd: list[str], log: Path, timeout: float) -> float | None:
    started = time.perf_counter()
    env = {**os.environ, "PYTHONFAULTHANDLER": "1"}
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.send_signal(6)
            proc.wait()
            print(f"{' '.join(cmd[-3:])} timed out after {timeout} s", flush=True)
            return None
    seconds = round(time.perf_counter() - started, 1)
    print(f"{' '.join(cmd[-4:])} rc={proc.returncode} {seconds}s", flush=True)
    return seconds


def describe(path: Path) -> dict:
    import torch_nsight

    profile = torch_nsight.load(path, cache=False)
    k = profile.kernels
    time_col = "duration_ns"
    total = float(k[time_col].sum())
    inside = k["module"] != "(unattributed)"
    out = {"kernels": len(k), "coverage": profile.coverage,
           "inductor_kernels": int(k["kernel_full"].str.startswith("triton_").sum()),
           "attributed_pct": round(100 * float(k.loc[inside, time_col].sum()) / total, 2),
           "by_direction_pct": {str(d): round(100 * float(v) / total, 2) for d, v in
                                k.groupby(k["direction"].fillna("none"))[time_col].sum().items()},
           "fused_rows": int(k["fused_modules"].notna().sum()) if "fused_modules" in k else 0,
           "unattributed_top": k.loc[~inside].groupby("kernel")[time_col].sum()
           .sort_values(ascending=False).head(8).round(0).to_dict(),
           "top_modules": k.loc[inside].groupby("module")[time_col].sum()
           .sort_values(ascending=False).head(8).round(0).to_dict(),
           "contexts": k.loc[~inside, "context"].fillna("").value_counts().head(4).to_dict()}
    if "pct_of_roof" in k:  # compiled kernels on the roofline (FLOPs from the kernel maps)
        placed = k["pct_of_roof"].notna()
        out["roofline_placed_pct"] = round(100 * float(k.loc[placed, time_col].sum()) / total, 2)
        out["roofline_placed_pct_by_direction"] = {
            str(d): round(100 * float(rows.loc[placed, time_col].sum())
                          / max(float(rows[time_col].sum()), 1.0), 2)
            for d, rows in k.groupby(k["direction"].fillna("none"))}
        out["above_roof"] = int(k["above_roof"].fillna(False).astype(bool).sum())
        out["flops_basis"] = k["flops_basis"].fillna("none").value_counts().to_dict()
    return out


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--parts", default="ncu_whole,timeline_whole,ncu_block,timeline_block,"
                        "timeline_reduce,ncu_fullgraph,sweep")
    parser.add_argument("--depth", type=int, default=12)
    args = parser.parse_args()
    work = Path("/tmp/compiled_attribution")
    work.mkdir(exist_ok=True)
    (work / "sweep.py").write_text(SWEEP)
    (work / "graph.py").write_text(GRAPH)
    py = sys.executable
    summary: dict = {"depth": args.depth}
    for part in args.parts.split(","):
        kind, _, mode = part.partition("_")
        folder = work / part
        if kind == "sweep":
            seconds = timed([py, str(work / "sweep.py"), str(folder)], args.out / "sweep.log",
                            timeout=300)
            summary[part] = {"wall_s": seconds}
            if seconds is not None and (folder / "sweep.json").is_file():
                summary[part].update(describe(folder))
            print(part, json.dumps(summary[part], default=str)[:1500], flush=True)
            continue
        steps = ["--timeline", "--steps", "5:7"] if kind == "timeline" else ["--steps", "5:6"]
        if mode == "graph":
            script = [str(work / "graph.py")]
        else:  # under `hand` every kernel of the process is profiled: 2 blocks, 2 steps
            depth, steps_run = (2, "2") if kind == "hand" else (args.depth, "8")
            (work / f"vit_{mode}_{depth}.py").write_text(vit_script(mode, depth))
            script = [str(work / f"vit_{mode}_{depth}.py"), steps_run]
        if kind == "hand":  # recorded by hand: ncu --nvtx, no torch_nsight command
            from torch_nsight.metrics import METRIC_SETS

            folder.mkdir(exist_ok=True)
            command = [NCU, "--clock-control", "none", "--nvtx", "--metrics",
                       ",".join(METRIC_SETS["fast"].metrics), "-f", "-o",
                       str(folder / "report"), py, *script]
        else:
            command = [py, "-m", "torch_nsight", "profile", *steps, "--out", str(folder),
                       "--force", "--", py, *script]
        seconds = timed(command, args.out / f"{part}.log", timeout=300)
        summary[part] = {"wall_s": seconds}
        target = folder / "report.ncu-rep" if kind in ("ncu", "hand") else folder
        try:
            summary[part].update(describe(target))
        except Exception as err:  # noqa: BLE001 - keep going, say why
            summary[part]["error"] = repr(err)
        print(part, json.dumps(summary[part], default=str)[:1500], flush=True)
        keep = KEEP.get(part)
        if keep and target.exists():
            if target.is_file():
                stripped = work / keep
                subprocess.run([py, "tests/data/strip_code_modules.py", str(target),
                                str(stripped)], check=False)
                source = stripped if stripped.is_file() else target
                with open(args.out / f"{keep}.xz", "wb") as packed:
                    subprocess.run(["xz", "-T8", "-6", "-c", str(source)], stdout=packed,
                                   check=False)
            else:
                shutil.make_archive(str(args.out / keep), "xztar", target)
        (args.out / "summary.json").write_text(json.dumps(summary, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
