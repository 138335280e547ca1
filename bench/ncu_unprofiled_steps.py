"""What ncu does to the steps it does not profile: the same training steps timed bare and
under ``ncu`` with nothing profiled (GPU machine).

    PYTHONPATH=/tmp/site:$PWD python bench/ncu_unprofiled_steps.py --out OUT [--models a,b]

For each model, ``bench/zoo_app.py MODEL`` runs ``--rounds`` times each way, alternating:
bare (``TORCH_NSIGHT_INSTRUMENT=0``: no ranges) and under ``ncu --nvtx`` with the profile
command's options and an include filter that matches no range (every launch and range goes
through ncu, none is profiled). Both time steps ``--timed`` with CUDA events
(``TORCH_NSIGHT_TIMING``, the file ``profile --verify`` reads). Writes the medians per run
and their ratio to ``OUT/ncu_unprofiled_steps.json``: whether a step timed under ncu before
the profiled ones says how long the bare step is.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
APP = ROOT / "bench" / "zoo_app.py"


def _run(model: str, timed: str, last: int, under_ncu: bool, out: Path, tag: str) -> dict:
    timing = out / f"{model}_{tag}.json"
    env = dict(os.environ, TORCH_NSIGHT_STEPS=timed, TORCH_NSIGHT_TIMING=str(timing))
    app = [sys.executable, str(APP), model, "--steps", str(last)]
    if under_ncu:
        ncu = shutil.which("ncu") or "ncu"
        cmd = [ncu, "--clock-control", "none", "--target-processes", "application-only",
               "--nvtx", "--nvtx-include", "torch_nsight@no_such_range",
               "--metrics", "gpu__time_duration.sum", "-f", "-o", str(out / "unused"), *app]
    else:
        env["TORCH_NSIGHT_INSTRUMENT"] = "0"
        cmd = app
    began = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False, cwd=ROOT)
    wall = time.perf_counter() - began
    steps = []
    if timing.exists():
        steps = [s["time_ns"] / 1e6 for s in json.loads(timing.read_text())["steps"]]
        timing.unlink()  # kept in the summary: the device returns a limited count of files
    return {"model": model, "under_ncu": under_ncu, "rc": done.returncode, "wall_s": wall,
            "steps_ms": steps, "median_ms": statistics.median(steps) if steps else None,
            "tail": (done.stdout + done.stderr)[-1500:] if done.returncode else ""}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--models", default="llama_train,qwen2_moe,gin,shufflenet")
    parser.add_argument("--timed", default="6:16")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    last = int(args.timed.split(":")[1]) + 1
    records = []
    for model in args.models.split(","):
        for round_ in range(args.rounds):
            for under in ((False, True) if round_ % 2 == 0 else (True, False)):
                record = _run(model, args.timed, last, under, args.out,
                              f"{'ncu' if under else 'bare'}{round_}")
                records.append(record)
                print(json.dumps({k: v for k, v in record.items() if k != "steps_ms"}),
                      flush=True)
    summary = {}
    for model in args.models.split(","):
        mine = [r for r in records if r["model"] == model and r["median_ms"]]
        bare = [r["median_ms"] for r in mine if not r["under_ncu"]]
        ncu = [r["median_ms"] for r in mine if r["under_ncu"]]
        if bare and ncu:
            summary[model] = {"bare_ms": bare, "ncu_ms": ncu,
                              "ratio": statistics.median(ncu) / statistics.median(bare)}
    print(json.dumps(summary, indent=1))
    (args.out / "ncu_unprofiled_steps.json").write_text(json.dumps(
        {"command": " ".join(sys.argv), "records": records, "summary": summary}, indent=1))
    for leftover in args.out.glob("unused*"):
        leftover.unlink()
    return 0


if __name__ == "__main__":
    sys.exit(main())
