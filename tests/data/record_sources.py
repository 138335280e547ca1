"""Record the fixtures of the source registry (run on a GPU machine with ncu).

    PYTHONPATH=$PWD python tests/data/record_sources.py --out OUT

* ``sweep_stack/``: a sweep's output directory (manifest and compressed report): four
  Llama-style blocks (hidden 256) in a ``Sequential``, bf16, forward and backward, at two
  shapes; identical blocks replicated; the calls table in the manifest.
* ``hand_s128.ncu-rep.xz``, ``hand_s512.ncu-rep.xz`` and their ``.calls.json``:
  ``tests/data/hand_recorded.py`` at seq 128 and 512, recorded by hand with ``ncu --nvtx``
  and the sweep's default metric set, instrumented, without any shape label.
* ``emit_nvtx.ncu-rep.xz``: the same step under ``torch.autograd.profiler.emit_nvtx()``
  (no module ranges), SpeedOfLight only.

``recorded_sources.json`` says what ran (device, date, commands, seconds).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
DATA = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(DATA))

import record_fixtures as fixtures  # noqa: E402

import torch_nsight  # noqa: E402
from torch_nsight.demo.llama import LlamaBlock  # noqa: E402
from torch_nsight.metrics import METRIC_SETS  # noqa: E402

HIDDEN, HEADS, INTERMEDIATE, LAYERS = 256, 4, 704, 4
SHAPES = {"2x128x256": (2, 128, HIDDEN), "2x512x256": (2, 512, HIDDEN)}


def stack() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(*[LlamaBlock(HIDDEN, HEADS, INTERMEDIATE) for _ in range(LAYERS)])


def record_sweep(out: Path) -> dict:
    target = out / "sweep_stack"
    shutil.rmtree(target, ignore_errors=True)
    started = time.perf_counter()
    profile = torch_nsight.sweep(stack, SHAPES, dtype="bf16", backward=True,
                                 output_dir=target, quiet=True)
    seconds = time.perf_counter() - started
    for path in target.iterdir():
        if path.name == "sweep.ncu-rep":
            fixtures.compress(path)
        elif path.name not in ("sweep.json", "job.json"):
            path.unlink()
    return {"case": "sweep_stack", "seconds": round(seconds, 1),
            "rows": len(profile.kernels), "replicated_rows": profile.replicated_rows,
            "calls": 0 if profile.calls is None else len(profile.calls),
            "failures": profile.failures}


def record_by_hand(out: Path, ncu: str, name: str, workload: list[str], sections: tuple[str, ...],
                   metrics: list[str]) -> dict:
    report = out / f"{name}.ncu-rep"
    cmd = [ncu, "--clock-control", "none", "--nvtx", "-f", "-o", str(report)]
    for section in sections:
        cmd += ["--section", section]
    if metrics:
        cmd += ["--metrics", ",".join(metrics)]
    cmd += [sys.executable, str(DATA / "hand_recorded.py"), *workload]
    env = dict(os.environ, PYTHONPATH=f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    started = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    log = proc.stdout + proc.stderr
    if report.is_file():
        fixtures.compress(report)
    return {"case": name, "returncode": proc.returncode,
            "seconds": round(time.perf_counter() - started, 1),
            "kernels_profiled": log.count("==PROF== Profiling"),
            "command": [Path(c).name if c in (sys.executable, ncu) else c for c in cmd],
            "log_tail": log[-1500:]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DATA)
    parser.add_argument("--only", choices=("sweep", "hand"), default=None,
                        help="record only the sweep directory, or only the reports by hand")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    ncu = fixtures.find_ncu()
    bases = fixtures.known_metric_bases(ncu)
    chosen = METRIC_SETS["roofline"]
    metrics = [m for m in chosen.metrics if not m.startswith(("launch__", "device__"))
               and m.split(".")[0] in bases]
    records = [] if args.only == "hand" else [record_sweep(args.out)]
    for seq in (128, 512) if args.only != "sweep" else ():
        name = f"hand_s{seq}"
        records.append(record_by_hand(
            args.out, ncu, name, ["--seq", str(seq), "--calls",
                                  str(args.out / f"{name}.calls.json")],
            chosen.sections, metrics))
    if args.only != "sweep":
        records.append(record_by_hand(args.out, ncu, "emit_nvtx",
                                      ["--seq", "128", "--emit-nvtx"], ("SpeedOfLight",), []))
    summary = {"device": fixtures.gpu_name(), "torch": torch.__version__,
               "ncu": subprocess.run([ncu, "--version"], capture_output=True,
                                     text=True).stdout.strip().splitlines()[-1],
               "date": dt.date.today().isoformat(), "records": records}
    name = "recorded_sources.json" if args.only is None else f"recorded_sources_{args.only}.json"
    (args.out / name).write_text(json.dumps(summary, indent=1))
    print(json.dumps(summary, indent=1)[:6000])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
