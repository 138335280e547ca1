"""Twins by what they launch, on the GPU: torchvision ConvNeXt-T, bf16, channels-last training.

    PYTHONPATH=/tmp/site:$PWD python bench/twins_convnext.py --out OUT [--model convnext_t_tv]

torchvision's ConvNeXt gives every block its own stochastic-depth rate (0.1 over 18 blocks),
which the sibling check used to read as twins that differ: no block was replicated (issue 36).
Runs ``bench/zoo_app.py MODEL`` (bs 32, 224x224, bf16 autocast, channels-last, AdamW) under

0. the sibling check in this process on one training step: every group and every note on
   twins that launch differently (which launch differed);
1. ``torch-nsight profile --steps 5:6 --dry-run``: the sibling check's verdict, no ncu;
2. ``torch-nsight profile --steps 5:6``: kernels profiled against replicated, wall time;
3. ``torch-nsight profile --steps 5:6 --no-replicate``: every block measured, to check that the
   replicated blocks' totals stay within the noise of the measured ones (median within ~1%).

Prints one line per phase and writes ``OUT/twins_convnext.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
APP = ROOT / "bench" / "zoo_app.py"


def _profile(model: str, out: Path, *extra: str) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "torch_nsight", "profile", "--steps", "5:6", "--out", str(out),
           "--force", *extra, "--", sys.executable, str(APP), model, "--steps", "7"]
    started = time.time()
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=580,
                          env={**os.environ, "PYTHONPATH": os.environ.get("PYTHONPATH", "")})
    text = proc.stdout + proc.stderr
    return {"rc": proc.returncode, "wall_s": round(time.time() - started, 1), "text": text,
            "time_line": next((line for line in text.splitlines()
                               if line.startswith("time:")), None)}


def _block(module: Any) -> str | None:
    """``features.S.B`` of a row's module (backward rows too), or None outside the blocks."""
    if not isinstance(module, str):
        return None
    parts = module.removeprefix("bwd:").split(".")
    return ".".join(parts[:3]) if parts[0] == "features" and len(parts) >= 3 else None


def check_here(model_name: str) -> dict[str, Any]:
    """The sibling check on one warm training step of the zoo's script, in this process."""
    sys.path.insert(0, str(APP.parent))
    from zoo_app import build

    from torch_nsight.capture.replicas.siblings import check_siblings

    model, make = build(model_name)
    step = make(model)
    for i in range(3):
        step(i)
    verdict = check_siblings(model, lambda: step(3), backward=True, cuda=True)
    groups = [(g["representative"], g["replicas"]) for g in verdict["groups"]]
    print(f"check here: {verdict['status']}, {len(groups)} group(s), "
          f"{sum(len(r) for _, r in groups)} replica(s)")
    for representative, replicas in groups:
        print(f"  {representative} stands for {', '.join(replicas)}")
    for line in verdict["mismatches"]:
        print(f"  note: {line[:400]}")
    return {"status": verdict["status"], "groups": groups, "mismatches": verdict["mismatches"]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--model", default="convnext_t_tv")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    import torch_nsight

    record: dict[str, Any] = {"model": args.model, "check_here": check_here(args.model)}
    dry = _profile(args.model, args.out / "dry", "--dry-run")
    record["dry_run"] = {"rc": dry["rc"], "wall_s": dry["wall_s"], "lines": [
        line for line in dry["text"].splitlines() if "sibling" in line or "twins" in line]}
    print(f"dry run (rc {dry['rc']}, {dry['wall_s']} s):", *record["dry_run"]["lines"],
          sep="\n  ")

    tables = {}
    for name, extra in (("replicated", ()), ("direct", ("--no-replicate",))):
        ran = _profile(args.model, args.out / name, *extra)
        entry: dict[str, Any] = {"rc": ran["rc"], "wall_s": ran["wall_s"],
                                 "time_line": ran["time_line"]}
        if ran["rc"] == 0:
            kernels = torch_nsight.load(args.out / name, cache=False).kernels
            kernels = kernels[kernels["duration_ns"].notna()]
            copied = kernels["replicated_from"].notna()
            entry.update(kernels=len(kernels), profiled=int((~copied).sum()),
                         replicated=int(copied.sum()),
                         replicated_blocks=sorted({b for b in kernels.loc[copied, "module"]
                                                   .map(_block) if b}))
            tables[name] = kernels
        else:
            entry["error"] = "\n".join(ran["text"].splitlines()[-15:])
        record[name] = entry
        print(f"{name}: rc {entry['rc']}, {entry['wall_s']} s, {entry.get('kernels')} kernels, "
              f"{entry.get('profiled')} profiled, {entry.get('replicated')} replicated "
              f"({len(entry.get('replicated_blocks', []))} blocks); {entry['time_line']}")

    if len(tables) == 2:
        totals = {name: t.assign(block=t["module"].map(_block)).groupby("block")
                  ["duration_ns"].sum() for name, t in tables.items()}
        errors = {b: 100.0 * abs(totals["replicated"][b] - totals["direct"][b])
                  / totals["direct"][b]
                  for b in record["replicated"]["replicated_blocks"] if b in totals["direct"]}
        if errors:
            values = sorted(errors.values())
            record["block_totals_err_pct"] = {
                "median": round(statistics.median(values), 2),
                "p90": round(values[int(0.9 * (len(values) - 1))], 2),
                "max": round(values[-1], 2), "per_block": {b: round(e, 2)
                                                           for b, e in errors.items()}}
            print("replicated block totals against measured ones: median "
                  f"{record['block_totals_err_pct']['median']}%, p90 "
                  f"{record['block_totals_err_pct']['p90']}%, max "
                  f"{record['block_totals_err_pct']['max']}% over {len(values)} blocks")
    (args.out / "twins_convnext.json").write_text(json.dumps(record, indent=1))
    return 0 if record.get("replicated", {}).get("rc") == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
