"""Record the real Nsight Compute reports of the tests (run on a GPU machine with ncu).

    PYTHONPATH=$PWD python tests/data/record_fixtures.py            # each into its place
    PYTHONPATH=$PWD python tests/data/record_fixtures.py --out /tmp/try

Each report goes to its place in the repository (:data:`HOMES`): the demo's report,
``llama_block_fwd_bwd``, ships in the package (``torch_nsight/demo/``); the others stay in
``tests/data/``. ``--out DIR`` puts every report (and ``recorded.json``) in DIR instead.

Each case runs ``examples/profile_by_hand.py`` under ``ncu`` with the sweep's default metric
set (torch_nsight.metrics.METRIC_SETS["roofline"]), keeps only the measured iteration
(``--nvtx-include torch_nsight@measure``), compresses the report with xz and appends what was
done (device, date, command, ncu's pass count) to ``recorded.json`` beside it.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import lzma
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DATA = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))

from torch_nsight.metrics import METRIC_SETS, MetricSet  # noqa: E402
from torch_nsight.naming import DOMAIN, MEASURE_MESSAGE  # noqa: E402

CASES: dict[str, list[str]] = {
    # the instrumented Llama-style block, forward and backward, functional ops named
    "llama_block_fwd_bwd": ["llama", "--batch", "1", "--seq", "512", "--dtype", "bf16",
                            "--backward", "--ops"],
    # a small conv net, inference in fp16
    "convnet_fwd": ["convnet", "--batch", "8", "--seq", "64", "--dtype", "fp16"],
}
#: Where a case's report is kept, when not tests/data: the demo reads its report from the
#: installed package.
HOMES: dict[str, Path] = {"llama_block_fwd_bwd": ROOT / "torch_nsight" / "demo"}


def find_ncu() -> str:
    return shutil.which("ncu") or "/usr/local/cuda/bin/ncu"


def known_metric_bases(ncu: str) -> set[str]:
    """Base names of the metrics this GPU's ncu knows (``ncu --query-metrics``)."""
    out = subprocess.run([ncu, "--query-metrics"], capture_output=True, text=True).stdout
    return {line.split()[0] for line in out.splitlines() if re.match(r"^[a-z0-9_]+__\w+", line)}


def ncu_command(ncu: str, metrics: list[str], sections: tuple[str, ...], report: Path,
                workload: list[str]) -> list[str]:
    cmd = [ncu, "--clock-control", "none", "--nvtx", "--nvtx-include",
           f"{DOMAIN}@{MEASURE_MESSAGE}", "-f", "-o", str(report)]
    for section in sections:
        cmd += ["--section", section]
    if metrics:
        cmd += ["--metrics", ",".join(metrics)]
    return cmd + [sys.executable, str(ROOT / "examples" / "profile_by_hand.py"), *workload]


def record(case: str, out_dir: Path, ncu: str, metric_set: str = "roofline") -> dict:
    """Profile one case; return what was recorded (also used by the GPU tests).

    ``metric_set`` names one of torch_nsight's metric sets; any other name collects the
    kernel duration alone (one replay pass: quick)."""
    chosen = METRIC_SETS.get(metric_set) or MetricSet(metric_set, ("gpu__time_duration.sum",))
    bases = known_metric_bases(ncu)
    # launch__* and device__* values are recorded with every kernel: not asked for by name
    wanted = [m for m in chosen.metrics if not m.startswith(("launch__", "device__"))]
    metrics = [m for m in wanted if m.split(".")[0] in bases]
    dropped = sorted(set(wanted) - set(metrics))
    report = out_dir / f"{case}.ncu-rep"
    cmd = ncu_command(ncu, metrics, chosen.sections, report, CASES[case])
    env = dict(os.environ, PYTHONPATH=f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    started = dt.datetime.now(dt.timezone.utc)
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    log = proc.stdout + proc.stderr
    passes = sorted({int(p) for p in re.findall(r"- (\d+) passes", log)})
    kernels = len(re.findall(r"==PROF== Profiling", log))
    return {"case": case, "report": report.name, "returncode": proc.returncode,
            "kernels_profiled": kernels, "passes_per_kernel": passes,
            "metric_set": metric_set, "metrics_dropped_unknown_here": dropped,
            "command": [Path(c).name if c == sys.executable else c for c in cmd],
            "started_utc": started.isoformat(timespec="seconds"),
            "seconds": round((dt.datetime.now(dt.timezone.utc) - started).total_seconds(), 1),
            "log_tail": log[-3000:]}


def gpu_name() -> str:
    out = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                         capture_output=True, text=True).stdout.strip()
    return out or "unknown"


def compress(path: Path) -> Path:
    target = path.with_name(path.name + ".xz")
    with open(path, "rb") as src, lzma.open(target, "wb", preset=9 | lzma.PRESET_EXTREME) as dst:
        shutil.copyfileobj(src, dst)
    path.unlink()
    return target


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None,
                        help="put every report here (default: each in its place, HOMES)")
    parser.add_argument("--cases", nargs="*", default=list(CASES))
    args = parser.parse_args()
    ncu = find_ncu()
    version = subprocess.run([ncu, "--version"], capture_output=True, text=True).stdout
    records = []
    for case in args.cases:
        out = args.out if args.out is not None else HOMES.get(case, DATA)
        info = record(case, out, ncu)
        info["gpu"] = gpu_name()
        info["ncu_version"] = version.strip().splitlines()[-1]
        if (out / info["report"]).exists():
            info["report"] = compress(out / info["report"]).name
        print(json.dumps({k: v for k, v in info.items() if k != "log_tail"}), flush=True)
        records.append(info)
    (args.out or DATA).joinpath("recorded.json").write_text(json.dumps(records, indent=1))
    return 0 if all(r["returncode"] == 0 for r in records) else 1


if __name__ == "__main__":
    raise SystemExit(main())
