"""What one profiled kernel costs ncu 2025.3.1, by metric list (GPU machine).

    PYTHONPATH=/tmp/site:$PWD python bench/ncu_kernel_cost.py --out OUT [--repeats 2]

A small app holds 4 GiB on the GPU and launches 300 elementwise kernels inside the NVTX
range ncu profiles. Each ncu command is timed from outside: first with a filter that
matches nothing (ncu's and the app's own start-up), then with ``duration``'s list (no
hardware counter), the ``fast`` list, ``fast`` without its four busy counters, ``fast``
with the duration from cycles instead of ``gpu__time_duration``, and ``fast`` and
``duration`` with ``--cache-control none``, and ``fast`` and ``duration`` under
application replay (``--replay-mode application``: one pass, so the app runs once). The
start-up is timed twice (the first command is cold). (wall - start-up) / 300 is the cost of a
kernel. Also checks that ncu reports 1 pass for each list. Writes OUT/ncu_kernel_cost.json.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from torch_nsight.metrics import METRIC_SETS

NCU = "/usr/local/cuda/bin/ncu"
KERNELS = 300
APP = """
import torch, nvtx
big = [torch.empty(256 * 2**20, dtype=torch.uint8, device="cuda") for _ in range(16)]
x = torch.randn(4096, 4096, device="cuda")
torch.cuda.synchronize()
with nvtx.annotate("tn_measure", domain="torch_nsight"):
    for _ in range(100):
        x = torch.relu(x * 1.0001 + 0.5)  # 3 kernels
torch.cuda.synchronize()
"""


def lists() -> dict[str, tuple[list[str], list[str]]]:
    """Name -> (metrics, extra ncu arguments)."""
    fast = list(METRIC_SETS["fast"].metrics)
    duration = list(METRIC_SETS["duration"].metrics)
    busy = [m for m in fast if "pct_of_peak_sustained_elapsed" in m]
    cycles = ["gpc__cycles_elapsed.max", "gpc__cycles_elapsed.avg.per_second"]
    return {
        "duration": (duration, []), "fast": (fast, []),
        "fast_without_busy": ([m for m in fast if m not in busy], []),
        "fast_duration_from_cycles": ([m for m in fast if m != "gpu__time_duration.sum"]
                                      + cycles, []),
        "fast_cache_none": (fast, ["--cache-control", "none"]),
        "duration_cache_none": (duration, ["--cache-control", "none"]),
        "fast_app_replay": (fast, ["--replay-mode", "application"]),
        "duration_app_replay": (duration, ["--replay-mode", "application"]),
    }


def run(app: Path, report: Path, metrics: list[str], extra: list[str], include: str, *,
        timeout: float = 300) -> dict[str, object]:
    """One ncu command over ``app``, timed from outside: its exit status, seconds, the distinct
    pass counts of its kernels, ``passes_each`` (every kernel's), the kernels it profiled
    (``context:stream:name:invocation``) and its error lines."""
    started = time.time()
    done = subprocess.run([NCU, "--clock-control", "none", "--nvtx", "--nvtx-include",
                           f"torch_nsight@{include}/", "-f", "-o", str(report), *extra,
                           "--metrics", ",".join(metrics), sys.executable, str(app)],
                          capture_output=True, text=True, timeout=timeout)
    text = done.stdout + done.stderr
    each = [int(n) for n in re.findall(r"(\d+) pass", text)]
    return {"rc": done.returncode, "wall_s": round(time.time() - started, 2),
            "passes": sorted(set(each)), "passes_each": each,
            "profiled": re.findall(r'Profiling "([^"]+)"', text),
            "errors": [line for line in text.splitlines() if "ERR" in line][:5]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--only", default="", help="comma-separated list names (default: all)")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as folder:
        app, report = Path(folder) / "app.py", Path(folder) / "r"
        app.write_text(APP)
        duration = METRIC_SETS["duration"].metrics
        result: dict[str, object] = {"kernels": KERNELS, "start_up": [
            run(app, report, list(duration), [], "nothing_matches") for _ in range(2)]}
        only = [n for n in args.only.split(",") if n]
        for repeat in range(args.repeats):
            for name, (metrics, extra) in lists().items():
                if only and name not in only:
                    continue
                record = run(app, report, metrics, extra, "tn_measure")
                for bulky in ("passes_each", "profiled"):
                    record.pop(bulky)
                result.setdefault(name, []).append(record)  # type: ignore[union-attr]
                print(name, repeat, record, flush=True)
        (args.out / "ncu_kernel_cost.json").write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
