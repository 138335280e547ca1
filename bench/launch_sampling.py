"""``profile --replicate-launches`` against the default and ``--metric-set duration`` on the zoo's
recurrent steps (issue 46, item 1), whole commands timed from outside, on the GPU machine:

    PYTHONPATH=/tmp/site:$PWD python bench/launch_sampling.py --out OUT [--models lstm_lm,gru_lm]

Per model, ``torch-nsight profile --steps 12:13`` of ``bench/zoo_app.py MODEL --steps 14``:
the fast default (every launch profiled: the recurrent layers have no identical blocks),
the same with ``--replicate-launches``, and ``--metric-set duration`` with and without it.
The sampled profile's modules are compared with the default's (the launches it measured):
per module, sampled time / measured time - 1. Writes OUT/launch_sampling.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
APP = ROOT / "bench" / "zoo_app.py"
CASES = {"fast": [], "fast_sampled": ["--replicate-launches"],
         "duration": ["--metric-set", "duration"],
         "duration_sampled": ["--metric-set", "duration", "--replicate-launches"]}


def _run(model: str, folder: Path, extra: list[str]) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "torch_nsight", "profile", "--steps", "12:13", *extra,
           "--out", str(folder), "--force", "--", sys.executable, str(APP), model,
           "--steps", "14"]
    started = time.time()
    done = subprocess.run(cmd, capture_output=True, text=True, check=False, cwd=ROOT)
    text = done.stdout + done.stderr
    return {"rc": done.returncode, "wall_s": round(time.time() - started, 1),
            "time_line": next((line for line in text.splitlines() if line.startswith("time:")),
                              None),
            "tail": "\n".join(text.strip().splitlines()[-6:]) if done.returncode else ""}


def _modules(folder: Path) -> tuple[Any, int, int]:
    import torch_nsight

    kernels = torch_nsight.load(folder / "report.ncu-rep", cache=False).kernels
    copied = int(kernels["replicated_from"].notna().sum())
    return kernels.groupby("module")["duration_ns"].sum(), len(kernels), copied


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--models", default="lstm_lm,gru_lm")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {}
    for model in args.models.split(","):
        entry: dict[str, Any] = {}
        for case, extra in CASES.items():
            entry[case] = _run(model, args.out / f"{model}_{case}", extra)
            print(model, case, entry[case]["rc"], entry[case]["wall_s"], flush=True)
        try:
            measured, rows, _ = _modules(args.out / f"{model}_fast")
            sampled, sampled_rows, copied = _modules(args.out / f"{model}_fast_sampled")
            ratio = (sampled / measured - 1).dropna()
            entry["compare"] = {
                "rows_measured": rows, "rows_sampled": sampled_rows, "copied": copied,
                "total_ratio": float(sampled.sum() / measured.sum()),
                "module_median_abs": float(statistics.median(ratio.abs())),
                "module_max_abs": float(ratio.abs().max()),
                "modules": {str(k): round(float(v), 5) for k, v in ratio.items()}}
        except Exception as err:  # noqa: BLE001 - a bench records what failed
            entry["compare"] = {"error": f"{type(err).__name__}: {err}"}
        print(model, json.dumps(entry.get("compare", {}))[:600], flush=True)
        results[model] = entry
        (args.out / "launch_sampling.json").write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
