"""How far a bare step drifts between runs, and what switch fixes do to it (GPU machine).

    PYTHONPATH=/tmp/site:$PWD python bench/verify_drift.py --out OUT

Runs zoo models (bench/zoo_app.py) bare, one process per case in a fixed order, timing
steps 12:22 as ``profile --verify`` does (``bare_env``: TORCH_NSIGHT_STEPS, _TIMING,
_APPLY), with ``TORCH_LOGS=recompiles,graph_breaks`` to count what compiling did. The same
model's baseline runs first and last, so their difference is the machine's drift between
processes. Writes OUT/verify_drift.json (per case: median and every step time, the fixes'
outcome, the recompile/graph-break log lines).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from torch_nsight.collect.parent.bare import bare_env
from torch_nsight.environment import Steps
from torch_nsight.verify_exchange import parse_fixes, read_timing

APP = Path(__file__).resolve().parent / "zoo_app.py"
CASES = [
    ("gpt2", ""), ("gpt2", "compile@transformer.h.*.mlp.act"),
    ("gpt2", "compile@transformer.h.*.mlp.act:dynamic=false"),
    ("gpt2", "compile"), ("gpt2", "pad_linear@lm_head:multiple=64"), ("gpt2", ""),
    ("convnext_t", ""), ("convnext_t", "compile@stages.*.blocks.*"),
    ("convnext_t", "compile@stages.*.blocks.*.conv_dw"), ("convnext_t", "compile"),
    ("convnext_t", ""),
]


def case(model: str, fix: str) -> dict[str, object]:
    with tempfile.TemporaryDirectory() as folder:
        timing, status = Path(folder) / "t.json", Path(folder) / "s.jsonl"
        env = bare_env(os.environ, Steps(12, 22), parse_fixes(fix) if fix else [], timing, status)
        env["TORCH_LOGS"] = "recompiles,graph_breaks"
        started = time.time()
        done = subprocess.run([sys.executable, str(APP), model, "--steps", "24"], env=env,
                              capture_output=True, text=True, timeout=400)
        wall = time.time() - started
        try:
            times = read_timing(timing)
            ms, fixes = [t / 1e6 for t in times.times_ns], times.fixes
        except (OSError, ValueError) as err:
            ms, fixes = [], [{"error": str(err)}]
        lines = [line for line in (done.stdout + done.stderr).splitlines()
                 if "ecompil" in line or "raph break" in line]
        return {"model": model, "fix": fix, "rc": done.returncode, "wall_s": round(wall, 1),
                "median_ms": statistics.median(ms) if ms else None,
                "ms": [round(x, 2) for x in ms], "fixes": fixes,
                "n_recompile_lines": len(lines), "recompile_head": lines[:12]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    rows = []
    for model, fix in CASES:
        rows.append(case(model, fix))
        print(json.dumps({k: rows[-1][k] for k in ("model", "fix", "rc", "median_ms")}),
              flush=True)
        (args.out / "verify_drift.json").write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
