"""Replay passes per Nsight Compute section, and which rules estimate a speedup (GPU machine).

    python bench/section_passes.py OUT_DIR

For each section ``ncu --list-sections`` names, profiles one 4096x4096 bf16 matmul with that
section alone (``-c 1``, after a warm-up) and reads the pass count ncu prints; then profiles
the same kernel with every section and lists the rules that came with a speedup estimate.
Writes ``sections.json``.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

APP = ("import torch; a = torch.randn(4096, 4096, device='cuda', dtype=torch.bfloat16); "
       "a @ a; torch.cuda.synchronize(); a @ a; torch.cuda.synchronize()")
PASSES = re.compile(r"(\d+) pass(?:es)?")


def ncu(*args: str) -> str:
    done = subprocess.run(["ncu", "--clock-control", "none", "--launch-skip", "1", "-c", "1",
                           *args, sys.executable, "-c", APP], capture_output=True, text=True,
                          timeout=300)
    return done.stdout + done.stderr


def main() -> int:
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "out")
    out.mkdir(parents=True, exist_ok=True)
    listing = subprocess.run(["ncu", "--list-sections"], capture_output=True, text=True).stdout
    sections = [line.split()[0] for line in listing.splitlines()[2:] if line.strip()
                and not line.startswith("-")]
    passes = {}
    for section in sections:
        found = PASSES.findall(ncu("--section", section))
        passes[section] = int(found[-1]) if found else None
        print(section, passes[section], flush=True)
    report = out / "all"
    ncu("--set", "full", "-f", "-o", str(report))
    rules = []
    try:
        import ncu_report

        action = ncu_report.load_report(str(report) + ".ncu-rep").range_by_idx(0).action_by_idx(0)
        for result in action.rule_results():
            if result.has_speedup_estimation():
                estimate = result.speedup_estimation()
                rules.append({"rule": result.rule_identifier(),
                              "section": result.section_identifier(),
                              "speedup": estimate["speedup"], "type": str(estimate["type"])})
    except Exception as err:  # noqa: BLE001 - the pass counts are still worth keeping
        rules.append({"error": f"{type(err).__name__}: {err}"})
    (out / "sections.json").write_text(json.dumps({"passes": passes, "rules": rules}, indent=1))
    print(json.dumps(rules, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
