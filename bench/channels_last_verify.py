"""The channels-last switch on models that did not shape it: the profile's own figure and
``findings --benchmark``'s (the step's convolutions and batch norms timed in both layouts)
against ``--verify``'s measurement on the script's own steps (issue 43, GPU machine).

    PYTHONPATH=/tmp/site:$PWD python bench/channels_last_verify.py --models resnext50 --out OUT

For each model of ``bench/zoo_app.py``: ``torch-nsight profile --steps 12:13 --verify
--verify-fix channels_last --verify-steps 12:44 --verify-rounds 2`` (the fast profile, then
the switch off and on at every step: 16 pairs in each of 2 runs), then ``torch-nsight
findings OUT --benchmark --format json -n 1000``; each command timed from outside. Writes
``OUT/channels_last_verify.json``: the ``verified:`` line, the profile's channels-last rows
summed, the benchmark's rows summed (before, after, gain), and each command's wall time.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
APP = ROOT / "bench" / "zoo_app.py"


def _run(command: list[str]) -> tuple[int, float, str, str]:
    started = time.time()
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, timeout=560)
    return done.returncode, round(time.time() - started, 1), done.stdout, done.stderr


def _switch(rows: list[dict[str, Any]]) -> dict[str, Any]:
    mine = [row for row in rows if row.get("fix_code") == "channels_last"]

    def total(key: str) -> float | None:
        values = [row[key] for row in mine if isinstance(row.get(key), (int, float))]
        return round(sum(values) / 1e6, 3) if values else None

    return {"rows": len(mine), "gain_ms": total("est_gain_ns"), "before_ms": total("before_ns"),
            "after_ms": total("after_ns"),
            "basis": sorted({str(row.get("gain_basis")) for row in mine})}


def measure(model: str, out: Path) -> dict[str, Any]:
    folder = out / model
    rc, wall, stdout, stderr = _run(
        [sys.executable, "-m", "torch_nsight", "profile", "--steps", "12:13", "--verify",
         "--verify-fix", "channels_last", "--verify-steps", "12:44", "--verify-rounds", "2",
         "--out", str(folder), "--force", "--", sys.executable, str(APP), model,
         "--steps", "46"])
    record: dict[str, Any] = {
        "model": model, "profile_rc": rc, "profile_wall_s": wall,
        "verified": [line for line in (stdout + stderr).splitlines()
                     if line.startswith("verified:")],
        "time_line": next((line for line in stderr.splitlines() if line.startswith("time:")),
                          None)}
    (out / f"{model}_profile.log").write_text(stdout + stderr)
    if rc != 0:
        record["tail"] = "\n".join((stdout + stderr).splitlines()[-20:])
        return record
    for name, extra in (("profile_rows", []), ("benchmark", ["--benchmark"])):
        rc, wall, stdout, stderr = _run(
            [sys.executable, "-m", "torch_nsight", "findings", str(folder), *extra,
             "--format", "json", "-n", "1000"])
        record[f"{name}_wall_s"] = wall
        record[name] = _switch(json.loads(stdout)) if rc == 0 else {
            "rc": rc, "tail": "\n".join(stderr.splitlines()[-10:])}
    return record


def main() -> int:
    sys.path.insert(0, str(ROOT / "bench"))
    from channels_last_ops import run_per_model

    return run_per_model(__doc__.splitlines()[0], measure, "channels_last_verify.json")


if __name__ == "__main__":
    raise SystemExit(main())
