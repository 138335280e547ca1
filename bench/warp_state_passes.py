"""Which warp-state metrics ride along in the fast set's one replay pass (GPU machine).

    PYTHONPATH=/tmp/site:$PWD python bench/warp_state_passes.py --out OUT

The focused second pass of ``profile --stalls`` collects achieved occupancy, the
scheduler's warps and 18 stall reasons: 8 replay passes a kernel, in a second process. A
metric that fits in the pass the fast set already makes costs nothing more. This builds the
largest such list greedily: starting from the fast set, each warp-state metric of
:data:`torch_nsight.metrics.METRICS` (in the order the analysis needs them) is kept when ncu
still reports 1 pass for every kernel of a small app (a bf16 matmul, an elementwise chain, a
layer norm, a convolution). Then it times, as ``bench/ncu_kernel_cost.py`` does, 300
elementwise kernels profiled with the fast set and with the fast set plus what was kept
(whole ncu commands from outside; start-up measured with a filter that matches nothing).
Writes OUT/warp_state_passes.json.
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

from bench.ncu_kernel_cost import APP as COST_APP
from torch_nsight.metrics import METRIC_SETS, METRICS

NCU = "/usr/local/cuda/bin/ncu"
KINDS_APP = """
import torch, nvtx
a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
x = torch.randn(64, 128, 56, 56, device="cuda")
w = torch.randn(128, 128, 3, 3, device="cuda")
ln = torch.nn.LayerNorm(4096).cuda()
torch.cuda.synchronize()
with nvtx.annotate("tn_measure", domain="torch_nsight"):
    a @ a
    torch.relu(a * 2 + 1)
    ln(a.float())
    torch.nn.functional.conv2d(x, w, padding=1)
torch.cuda.synchronize()
"""
#: Stall reasons first by how often they lead on latency-bound kernels (docs/findings.md).
ORDER = ("long_scoreboard", "barrier", "short_scoreboard", "wait", "mio_throttle",
         "math_pipe_throttle", "lg_throttle", "not_selected", "no_instruction", "membar",
         "branch_resolving", "dispatch_stall", "drain", "imc_miss", "tex_throttle", "misc",
         "sleeping", "gmma")


def candidates() -> list[str]:
    warp = [m.name for m in METRICS if m.kind == "warp_state"]
    scheduler = [name for name in warp if "_issue_stalled_" not in name]
    stalls = [f"smsp__average_warps_issue_stalled_{r}_per_issue_active.ratio" for r in ORDER]
    return scheduler + [name for name in stalls if name in warp]


def ncu(app: Path, report: Path, metrics: list[str], include: str = "tn_measure"
        ) -> dict[str, object]:
    started = time.time()
    done = subprocess.run([NCU, "--clock-control", "none", "--nvtx", "--nvtx-include",
                           f"torch_nsight@{include}/", "-f", "-o", str(report),
                           "--metrics", ",".join(metrics), sys.executable, str(app)],
                          capture_output=True, text=True, timeout=300)
    text = done.stdout + done.stderr
    passes = [int(n) for n in re.findall(r"(\d+) pass", text)]
    return {"rc": done.returncode, "wall_s": round(time.time() - started, 2),
            "passes": passes, "tail": text.strip().splitlines()[-3:] if done.returncode else []}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    fast = list(METRIC_SETS["fast"].metrics)
    result: dict[str, object] = {}
    kept: list[str] = []
    tried: list[dict[str, object]] = []
    with tempfile.TemporaryDirectory() as folder:
        app, report = Path(folder) / "kinds.py", Path(folder) / "r"
        app.write_text(KINDS_APP)
        result["fast"] = ncu(app, report, fast)
        print("fast", result["fast"], flush=True)
        for name in candidates():
            record = ncu(app, report, fast + kept + [name])
            fits = record["rc"] == 0 and bool(record["passes"]) and max(record["passes"]) == 1
            tried.append({"metric": name, "fits": fits, **record})
            print(name, fits, record, flush=True)
            if fits:
                kept.append(name)
        result["tried"], result["kept"] = tried, kept
        cost_app = Path(folder) / "cost.py"
        cost_app.write_text(COST_APP)
        result["start_up"] = ncu(cost_app, report, fast, include="nothing_matches")
        for repeat in range(2):
            for label, metrics in (("fast", fast), ("fast_plus_kept", fast + kept)):
                record = ncu(cost_app, report, metrics)
                result.setdefault(f"cost_{label}", []).append(record)  # type: ignore[union-attr]
                print("cost", label, repeat, record, flush=True)
    (args.out / "warp_state_passes.json").write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
