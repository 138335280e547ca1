"""Nsight Compute's own rules as evidence: what ncu's analysis sections said of a finding's
kernels, with ncu's estimate.

A report recorded with ncu's analysis sections (``metric_set="full"``: Occupancy,
LaunchStats, SchedulerStats, WarpStateStats, MemoryWorkloadAnalysis...) carries, per kernel,
the rules that estimate a speedup (the reader's ``ncu_rules``: rule, title, message, type,
speedup in percent of the kernel's time). A rule's message is a diagnosis for a kernel's
author ("each warp spends 16.2 cycles stalled on a scoreboard dependency"), not a change to
a PyTorch model: it is never a finding's fix. :func:`rule_evidence` gives a finding's kernels'
rules, the :data:`RULES_PER_FINDING` largest, as evidence beside the finding's own cause.

ncu's estimates for one kernel overlap (issue-slot utilisation, stalls and occupancy often
describe the same cause), so they are never summed across rules: per rule, the sum over the
kernels of ``duration x speedup / 100``, per run. Only ``global`` estimates (of the whole
kernel's time) count: a ``local`` one estimates a part of the kernel and mostly restates a
global one.
"""

from __future__ import annotations

import json
from typing import Any

import pandas as pd

#: The rules kept per finding (the largest estimates).
RULES_PER_FINDING = 2
#: Rules that our own checks report with better evidence (small grid, tail effect).
SKIPPED_RULES = frozenset({"LaunchConfiguration"})


def rule_evidence(rows: pd.DataFrame) -> list[dict[str, Any]]:
    """The Nsight Compute rules with a global speedup estimate on ``rows``' kernels.

    Args:
        rows: kernel rows with ``ncu_rules`` (JSON text; missing or ``""`` without the
            sections), ``duration_ns`` and ``runs`` (the (source, run) pairs of their label).

    Returns:
        One record per rule, the largest estimate first, at most :data:`RULES_PER_FINDING`:
        ``rule``, ``title``, ``speedup_pct`` (its largest on a kernel) and ``gain_ns`` (per
        run); empty when no kernel carries rules.
    """
    if "ncu_rules" not in rows:
        return []
    found: dict[str, dict[str, Any]] = {}
    for text, duration, runs in zip(rows["ncu_rules"], rows["duration_ns"], rows["runs"],
                                    strict=True):
        if not isinstance(text, str) or not text:
            continue
        for rule in json.loads(text):
            if rule["rule"] in SKIPPED_RULES or rule["speedup_type"] != "global":
                continue
            mine = found.setdefault(rule["rule"], {"rule": rule["rule"],
                                                   "title": rule["title"],
                                                   "speedup_pct": 0.0, "gain_ns": 0.0})
            mine["speedup_pct"] = max(mine["speedup_pct"], float(rule["speedup_pct"]))
            mine["gain_ns"] += float(duration) * rule["speedup_pct"] / 100.0 / float(runs)
    ranked = sorted(found.values(), key=lambda r: r["gain_ns"], reverse=True)
    return ranked[:RULES_PER_FINDING]
