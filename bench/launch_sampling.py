"""``profile --replicate-launches`` against the default and ``--metric-set duration`` on the zoo's
recurrent steps (issue 46, item 1), whole commands timed from outside, on the GPU machine:

    PYTHONPATH=/tmp/site:$PWD python bench/launch_sampling.py --out OUT [--models lstm_lm,gru_lm]

Per model, ``torch-nsight profile --steps 12:13`` of ``bench/zoo_app.py MODEL --steps 14``:
the fast default (since 2026-11-28 it replicates launches by itself where the script's first
step finds a cuDNN recurrent layer), the same with ``--replicate-launches`` and with
``--no-replicate-launches`` (``fast_every``: every launch profiled), and ``--metric-set
duration`` with and without it.
The sampled profile's modules are compared with the default's (the launches it measured):
per module, sampled time / measured time - 1; so is the default under ncu's application
replay (``fast_app_replay``, one pass: the script runs once). ``--cases fast,duration`` runs
the default and its anchor only (any model of the zoo); ``--warm`` runs the script alone
once before a model's commands (the first command otherwise reads its files cold). Writes OUT/launch_sampling.json.
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
         "fast_every": ["--no-replicate-launches"],
         "duration": ["--metric-set", "duration"],
         "duration_sampled": ["--metric-set", "duration", "--replicate-launches"],
         "fast_app_replay": ["--ncu-arg=--replay-mode=application"],
         "duration_app_replay": ["--metric-set", "duration",
                                 "--ncu-arg=--replay-mode=application"]}
#: The cases whose modules are set against the default's (``fast``), where both ran: with
#: ``duration`` (every launch measured), what leaving repeated op calls out changes.
COMPARED = ("fast_sampled", "fast_every", "fast_app_replay", "duration")


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


def _compare(measured_at: Path, other_at: Path) -> dict[str, Any]:
    """Per module, the other command's time / the default's - 1 (what replication or another
    replay mode changes)."""
    try:
        measured, rows, _ = _modules(measured_at)
        other, other_rows, copied = _modules(other_at)
    except Exception as err:  # noqa: BLE001 - a bench records what failed
        return {"error": f"{type(err).__name__}: {err}"}
    ratio = (other / measured - 1).dropna()
    return {"rows_measured": rows, "rows_other": other_rows, "copied": copied,
            "total_ratio": float(other.sum() / measured.sum()),
            "module_median_abs": float(statistics.median(ratio.abs())),
            "module_max_abs": float(ratio.abs().max()),
            "modules": {str(k): round(float(v), 5) for k, v in ratio.items()}}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--models", default="lstm_lm,gru_lm")
    parser.add_argument("--cases", default=",".join(CASES),
                        help="which commands (default: all); fast,duration alone is the "
                             "default profile against its anchor")
    parser.add_argument("--warm", action="store_true",
                        help="run each model's script once alone (3 steps, untimed) first")
    args = parser.parse_args()
    cases = {case: CASES[case] for case in args.cases.split(",")}
    args.out.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {}
    for model in args.models.split(","):
        entry: dict[str, Any] = {}
        if args.warm:  # the first command of a model reads its files cold: not the command's cost
            started = time.time()
            subprocess.run([sys.executable, str(APP), model, "--steps", "3"], cwd=ROOT,
                           capture_output=True, check=False)
            entry["warm_s"] = round(time.time() - started, 1)
        for case, extra in cases.items():
            entry[case] = _run(model, args.out / f"{model}_{case}", extra)
            print(model, case, entry[case]["rc"], entry[case]["wall_s"], flush=True)
        for case in (c for c in COMPARED if c in cases and "fast" in cases):
            entry[f"compare_{case}"] = _compare(args.out / f"{model}_fast",
                                                args.out / f"{model}_{case}")
            print(model, case, json.dumps(entry[f"compare_{case}"])[:600], flush=True)
        results[model] = entry
        (args.out / "launch_sampling.json").write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
