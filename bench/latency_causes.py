"""The cause of every latency-bound kernel of the recorded latency fixtures, against Nsight
Compute's own rules in the same reports (CPU only).

    PYTHONPATH=$PWD python bench/latency_causes.py [REPORT ...]

Default reports: ``tests/data/latency/vit_s.ncu-rep.xz`` (where the thresholds of
``torch_nsight/analyze/stalls.py`` were set) and ``resnet50.ncu-rep.xz`` (checked with them
unchanged). For each: the latency-bound share of GPU time; the causes by GPU time and
launches; the top 10 latency-bound hotspots (``hotspots()``, folded, by headroom) and how
many name a cause; the second pass's targets (``stall_targets``); and, per profiled
latency-bound launch, whether one of the rules Nsight Compute's Occupancy, LaunchStats,
WarpStateStats and SchedulerStats sections fired with a global speedup estimate on that
launch says the same thing (:data:`AGREES`). Prints JSON.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pandas as pd

import torch_nsight
from torch_nsight.analyze import hotspots
from torch_nsight.analyze.limiter import LIMITER_CODES
from torch_nsight.analyze.stalls import stall_targets
from torch_nsight.render.hotspot_words import NEXT_STEP, word_hotspots

DATA = Path(__file__).resolve().parents[1] / "tests" / "data" / "latency"

#: What one of Nsight Compute's global rule results says, from its rule and message.
_FAMILIES = (
    ("LaunchConfiguration", "less than the GPU", "grid"),
    ("LaunchConfiguration", "partial wave", "tail"),
    ("LaunchConfiguration", "threads per block", "block"),
    ("TheoreticalOccupancy", "", "theoretical"),
    ("AchievedOccupancy", "", "achieved"),
    ("CPIStall", "L1TEX", "memory"),
    ("CPIStall", "after EXIT", "memory"),
    ("CPIStall", "fetch an instruction", "fetch"),
    ("CPIStall", "immediate constant", "fetch"),
    ("CPIStall", "barrier", "synchronization"),
    ("CPIStall", "MIO", "shared_memory"),
    ("CPIStall", "fixed latency", "issue"),
    ("CPIStall", "math pipe", "issue"),
    ("CPIStall", "selected to issue", "issue"),
)
#: Our cause -> the rule families that say the same (a small grid's kernels show ncu's
#: "only N blocks", its achieved-occupancy gap, or the instruction-fetch stalls that ncu
#: itself calls "typical for very short kernels with less than one full wave").
AGREES = {
    "launch_overhead": {"grid", "achieved", "fetch"},
    "small_grid": {"grid", "achieved", "fetch"},
    "tail": {"tail"},
    "registers": {"theoretical"}, "shared_memory": {"theoretical"},
    "block_size": {"theoretical", "block"}, "blocks_per_sm": {"theoretical"},
    "memory_latency": {"memory"},
    "synchronization": {"synchronization"},
    "instruction_issue": {"issue"},
    "shared_memory_access": {"shared_memory"},
    "few_warps": {"achieved", "grid", "tail"},
}


def families(rules: object) -> set[str]:
    """The families of a launch's global rule results (``ncu_rules`` JSON)."""
    found: set[str] = set()
    if not isinstance(rules, str):
        return found
    for rule in json.loads(rules):
        if rule.get("speedup_type") != "global":
            continue
        for name, words, family in _FAMILIES:
            if rule["rule"] == name and words in rule["message"]:
                found.add(family)
    return found


def summary(path: Path) -> dict[str, object]:
    """The numbers above for one report."""
    kernels = torch_nsight.load(path).kernels
    latency = kernels[kernels["bound"] == "latency"]
    causes = latency.groupby(latency["limiter"].fillna("none"))["duration_ns"]
    top = word_hotspots(hotspots(kernels, n=10_000))
    top = top[top["bound"] == "latency"].head(10)
    named = {NEXT_STEP[kind]: kind for kind in LIMITER_CODES}
    profiled = latency[latency["replicated_from"].isna()]
    agree = pd.Series([bool(AGREES.get(str(c), set()) & families(r))
                       for c, r in zip(profiled["limiter"], profiled["ncu_rules"], strict=True)],
                      index=profiled.index)
    targets = stall_targets(kernels)
    return {
        "report": path.name,
        "latency_pct_of_gpu_time": round(100 * latency["duration_ns"].sum()
                                         / kernels["duration_ns"].sum(), 1),
        "causes_ns": {k: float(v) for k, v in causes.sum().items()},
        "causes_launches": {k: int(v) for k, v in causes.size().items()},
        "top10_latency": [{"kernel": r["kernel"], "direction": r["direction"],
                           "cause": named.get(r["next_step"]), "reason": r["reason"]}
                          for r in top.to_dict("records")],
        "top10_named": int(top["next_step"].isin(named).sum()),
        "ncu_agrees_launches": f"{int(agree.sum())} of {len(agree)}",
        "ncu_agrees_time_pct": round(100 * profiled["duration_ns"][agree].sum()
                                     / profiled["duration_ns"].sum(), 1),
        "ncu_agrees_by_cause": {str(c): f"{int(a.sum())} of {len(a)}" for c, a in
                                agree.groupby(profiled["limiter"].fillna("none"))},
        "second_pass": {"names": len(targets),
                        "latency_covered_pct": round(float(targets["cumulative_pct"].iloc[-1]), 1)
                        if len(targets) else 0.0,
                        "launches": int(targets["profiled_launches"].sum()),
                        "of_profiled": int(kernels["replicated_from"].isna().sum())},
    }


def main(argv: list[str]) -> int:
    paths = [Path(a) for a in argv] or [DATA / "vit_s.ncu-rep.xz", DATA / "resnet50.ncu-rep.xz"]
    print(json.dumps([summary(p) for p in paths], indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
