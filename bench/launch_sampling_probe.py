"""What launch sampling rests on, checked on the GPU machine before it is built on (issue 46):

    PYTHONPATH=/tmp/site:$PWD python bench/launch_sampling_probe.py --out OUT

A small app runs its body three times outside the ``torch_nsight@measure`` start/end range and
then twice inside it (two ranges, as two chosen steps): adds and multiplies of one shape, adds
of another, a bf16 and an fp32 matmul (cuBLAS and CUTLASS kernels), and a 2-layer cuDNN LSTM
over 32 time steps with its backward. The questions:

1. Does PyTorch's profiler, in a process without ncu, list the same launches in the same order
   as ncu profiles them (every launch, ``all``)? Compared by the function name ncu shows
   (``function_name(..., for_filter=True)``), grid and block, per range.
2. Does ncu number a function's invocations across both ranges, counting only launches
   inside them, by that same function name (``--kernel-id ::regex:.*:N``)?
3. Which spelling of a set of invocation numbers ncu takes: ``1|3|5`` or ``(1|3|5)``.

Writes OUT/launch_sampling_probe.json.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from ncu_launch_filters import NCU, listed  # bench/ is on the path when run as a script

APP = r"""
import json, os, sys, torch, nvtx
x = torch.randn(2048, 2048, device="cuda")
s = torch.randn(1000, device="cuda")
a = torch.randn(1024, 1024, device="cuda", dtype=torch.bfloat16)
w = torch.randn(1024, 1000, device="cuda")
rnn = torch.nn.LSTM(256, 256, num_layers=2).cuda()
seq = torch.randn(32, 8, 256, device="cuda", requires_grad=True)

def body():
    for _ in range(3):
        x.add(1.0)
    for _ in range(3):
        x.mul(2.0)
    for _ in range(2):
        s.add(1.0)
    a @ a
    w.t() @ w
    out, _ = rnn(seq)
    out.sum().backward()

for _ in range(3):
    body()
torch.cuda.synchronize()
kineto = os.environ.get("KINETO") == "1"
if kineto:
    prof = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU,
                                              torch.profiler.ProfilerActivity.CUDA])
    prof.__enter__()
for step in range(2):
    handle = nvtx.start_range("measure", domain="torch_nsight")
    if kineto:
        torch.cuda.synchronize()
        mark = torch.profiler.record_function(f"range{step}")
        mark.__enter__()
    body()
    torch.cuda.synchronize()
    if kineto:
        mark.__exit__(None, None, None)
    nvtx.end_range(handle)
if kineto:
    prof.__exit__(None, None, None)
    path = sys.argv[1]
    prof.export_chrome_trace(path)
"""
VARIANTS = {
    "all": [],
    "alternation": ["--kernel-id", "::regex:.*:1|3|5"],
    "group": ["--kernel-id", "::regex:.*:(1|3|5)"],
    "late": ["--kernel-id", "::regex:.*:(40|41|70)"],
}


def traced(path: Path) -> list[dict[str, object]]:
    from torch_nsight.report.trace import function_name

    events = json.loads(path.read_text())["traceEvents"]
    ranges = sorted((e["ts"], e["ts"] + e["dur"], e["name"]) for e in events
                    if e.get("ph") == "X" and str(e.get("name", "")).startswith("range")
                    and e.get("cat") == "user_annotation")
    launches = {e["args"].get("correlation"): e for e in events
                if e.get("ph") == "X" and e.get("cat") == "cuda_runtime"}
    out = []
    for e in events:
        if e.get("ph") != "X" or e.get("cat") != "kernel":
            continue
        corr = e["args"].get("correlation")
        launch = launches.get(corr)
        ts = launch["ts"] if launch else e["ts"]
        inside = [r[2] for r in ranges if r[0] <= ts <= r[1]]
        if not inside:
            continue
        grid, block = e["args"].get("grid"), e["args"].get("block")
        out.append({"range": inside[0], "corr": corr, "launch_ts": ts, "gpu_ts": e["ts"],
                    "name": function_name(e["name"], for_filter=True), "full": e["name"][:120],
                    "grid": grid[0] * grid[1] * grid[2] if grid else None,
                    "block": block[0] * block[1] * block[2] if block else None})
    out.sort(key=lambda r: r["corr"])
    return out


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    app = args.out / "app.py"
    app.write_text(APP)
    results: dict[str, object] = {}
    trace = args.out / "trace.json"
    done = subprocess.run([sys.executable, str(app), str(trace)], capture_output=True,
                          text=True, check=False, env={**os.environ, "KINETO": "1"})
    results["kineto"] = {"rc": done.returncode, "tail": done.stderr[-1500:],
                         "launches": traced(trace) if trace.exists() else None}
    print("kineto", done.returncode, len(results["kineto"]["launches"] or []), flush=True)
    for name, extra in VARIANTS.items():
        report = args.out / name
        cmd = [NCU, "--clock-control", "none", "--nvtx", "--nvtx-include",
               "torch_nsight@measure", "--metrics", "gpu__time_duration.sum", "-f", "-o",
               str(report), *extra, sys.executable, str(app), "-"]
        started = time.time()
        done = subprocess.run(cmd, capture_output=True, text=True, check=False)
        rep = report.with_suffix(".ncu-rep")
        entry: dict[str, object] = {"rc": done.returncode, "s": round(time.time() - started, 1),
                                    "tail": (done.stdout + done.stderr)[-1500:],
                                    "profiled": listed(rep) if rep.exists() else None}
        results[name] = entry
        print(name, entry["rc"], entry["s"], "profiled:",
              None if entry["profiled"] is None else len(entry["profiled"]), flush=True)
    (args.out / "launch_sampling_probe.json").write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
