"""Which launches ncu 2025.3.1's launch filters keep inside the profiled NVTX range, and
whether PyTorch's profiler records every launch of a step that ncu profiles (GPU machine).

    PYTHONPATH=/tmp/site:$PWD python bench/ncu_launch_filters.py --out OUT

A small app runs its body three times outside the ``torch_nsight@measure`` start/end range
(warm-up) and once inside: 6 adds and 6 multiplies of one shape, 3 adds of another, and a
2-layer cuDNN LSTM over 32 time steps (its per-step kernels all launched by one ATen call).
Each ncu command profiles the duration alone; ``ncu --import`` lists what it profiled
(name, grid, block). The variants:

* ``all``: no launch filter (every launch of the range);
* ``kernel_id``: ``--kernel-id ::regex:.*:[12]`` (the first two invocations of each
  kernel function, if ncu counts them inside the range; none of the repeated ones if it
  counts the warm-up); ``kernel_id_anchored`` the same as ``^[12]$``;
* ``kernel_id_demangled``: the same, ``--kernel-name-base demangled``;
* ``per_config``: ``--filter-mode per-launch-config -c 2``;
* ``kineto``: ``per_config`` with ``torch.profiler`` recording the range in the same
  process: whether it runs at all under ncu, and how many kernels it sees.

Writes OUT/ncu_launch_filters.json.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import subprocess
import sys
import time
from pathlib import Path

NCU = "/usr/local/cuda/bin/ncu"
APP = r"""
import json, os, sys, torch, nvtx
x = torch.randn(2048, 2048, device="cuda")
s = torch.randn(1000, device="cuda")
rnn = torch.nn.LSTM(256, 256, num_layers=2).cuda()
seq = torch.randn(32, 8, 256, device="cuda")

def body():
    for _ in range(6):
        x.add(1.0)
    for _ in range(6):
        x.mul(2.0)
    for _ in range(3):
        s.add(1.0)
    rnn(seq)

for _ in range(3):
    body()
torch.cuda.synchronize()
kineto = os.environ.get("KINETO") == "1"
if kineto:
    prof = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU,
                                              torch.profiler.ProfilerActivity.CUDA])
    prof.__enter__()
handle = nvtx.start_range("measure", domain="torch_nsight")
body()
torch.cuda.synchronize()
nvtx.end_range(handle)
if kineto:
    prof.__exit__(None, None, None)
    kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    out = [{"name": e.name, "us": e.device_time} for e in kernels]
    with open(sys.argv[1], "w") as f:
        json.dump(out, f)
"""
VARIANTS = {
    "all": ([], {}),
    "kernel_id": (["--kernel-id", "::regex:.*:[12]"], {}),
    "kernel_id_anchored": (["--kernel-id", "::regex:.*:^[12]$"], {}),
    "kernel_id_demangled": (["--kernel-id", "::regex:.*:[12]",
                             "--kernel-name-base", "demangled"], {}),
    "per_config": (["--filter-mode", "per-launch-config", "-c", "2"], {}),
    "kineto": (["--filter-mode", "per-launch-config", "-c", "2"], {"KINETO": "1"}),
}


def listed(report: Path) -> list[dict[str, str]]:
    done = subprocess.run([NCU, "--import", str(report), "--page", "raw", "--csv",
                           "--metrics", "launch__grid_size,launch__block_size"],
                          capture_output=True, text=True, check=False)
    rows = list(csv.DictReader(io.StringIO(done.stdout)))
    return [{"name": r.get("Kernel Name", ""), "grid": r.get("launch__grid_size", ""),
             "block": r.get("launch__block_size", "")} for r in rows[1:]]


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    app = args.out / "app.py"
    app.write_text(APP)
    results: dict[str, object] = {}
    for name, (extra, env) in VARIANTS.items():
        report = args.out / name
        kineto = args.out / f"{name}.kineto.json"
        cmd = [NCU, "--clock-control", "none", "--nvtx", "--nvtx-include",
               "torch_nsight@measure", "--metrics", "gpu__time_duration.sum", "-f", "-o",
               str(report), *extra, sys.executable, str(app), str(kineto)]
        started = time.time()
        done = subprocess.run(cmd, capture_output=True, text=True, check=False,
                              env={**os.environ, **env})
        entry: dict[str, object] = {"rc": done.returncode, "s": round(time.time() - started, 1),
                                    "tail": (done.stdout + done.stderr)[-1500:]}
        rep = report.with_suffix(".ncu-rep")
        entry["profiled"] = listed(rep) if rep.exists() else None
        if kineto.exists():
            seen = json.loads(kineto.read_text())
            entry["kineto_kernels"] = len(seen)
            entry["kineto_sample"] = seen[:40]
        results[name] = entry
        print(name, entry["rc"], entry["s"], "profiled:",
              None if entry["profiled"] is None else len(entry["profiled"]),
              "kineto:", entry.get("kineto_kernels"), flush=True)
    (args.out / "ncu_launch_filters.json").write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
