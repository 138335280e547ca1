"""Nsight Compute's own rules as findings: per module, de-duplicated, with ncu's estimate.

A report recorded with ncu's analysis sections (``metric_set="full"``: Occupancy,
LaunchStats, SchedulerStats, WarpStateStats, MemoryWorkloadAnalysis...) carries, per kernel,
the rules that estimate a speedup (the reader's ``ncu_rules``: rule, title, message, type,
speedup in percent of the kernel's time). ncu's estimates for one kernel overlap (issue-slot
utilisation, stalls and occupancy often describe the same cause), so they are never summed
across rules: per (variant, shape, module, direction, rule) the gain is the sum over that
module's kernels of ``duration x speedup / 100``, per run, and each module keeps its
:data:`RULES_PER_MODULE` largest rules. Only ``global`` estimates (of the whole kernel's
time) are kept, with confidence ``medium``: a ``local`` one estimates a part of the kernel
and mostly restates a global one (issue-slot utilisation beside the stall that causes it).
"""

from __future__ import annotations

import json

import pandas as pd

from torch_nsight.analyze.frames import blank_to_none, keyed, per_run
from torch_nsight.vocabulary import FINDING_COLUMNS, LABELS

#: The rules kept per module (the largest estimates).
RULES_PER_MODULE = 2
#: Rules that our own checks report with better evidence (small grid, tail effect).
SKIPPED_RULES = frozenset({"LaunchConfiguration"})


def _first_sentence(text: str, limit: int = 220) -> str:
    sentence = text.split(". ")[0].strip().rstrip(".")
    return (sentence[: limit - 1] + "…") if len(sentence) > limit else sentence + "."


def rule_findings(kernels: pd.DataFrame) -> pd.DataFrame:
    """One finding per module and Nsight Compute rule with a speedup estimate.

    Args:
        kernels: an attributed kernel table; rows without ``ncu_rules`` are skipped.

    Returns:
        :data:`FINDING_COLUMNS` (``finding`` is ``ncu_<rule>``, ``gain_basis`` ``ncu_rule``),
        largest gain first; empty when no kernel carries rules.
    """
    if "ncu_rules" not in kernels or kernels["ncu_rules"].isna().all():
        return pd.DataFrame(columns=list(FINDING_COLUMNS))
    rows = []
    for _, kernel in kernels[kernels["ncu_rules"].notna()].iterrows():
        for rule in json.loads(kernel["ncu_rules"]):
            if rule["rule"] in SKIPPED_RULES or rule["speedup_type"] != "global":
                continue
            rows.append({**{c: kernel.get(c) for c in (*LABELS, "source", "run", "module",
                                                     "module_path", "direction", "op",
                                                     "kernel")},
                         "rule": rule["rule"], "title": rule["title"],
                         "message": rule["message"], "type": rule["speedup_type"],
                         "gain": float(kernel["duration_ns"]) * rule["speedup_pct"] / 100.0,
                         "pct": rule["speedup_pct"]})
    if not rows:
        return pd.DataFrame(columns=list(FINDING_COLUMNS))
    keys = [*LABELS, "module", "module_path", "direction", "rule"]
    work = keyed(pd.DataFrame(rows), keys, ["gain", "pct", "kernel", "title", "message",
                                            "type", "op"])
    grouped = work.groupby(keys, sort=False).agg(
        gain=("gain", "sum"), pct=("pct", "max"), kernels=("kernel", lambda s: "; ".join(
            dict.fromkeys(s))), title=("title", "first"), message=("message", "first"),
        type=("type", "first"), op=("op", "first")).reset_index()
    grouped = per_run(grouped, kernels, LABELS, ["gain"])
    grouped = grouped.sort_values("gain", ascending=False, kind="stable")
    grouped = grouped.groupby([*LABELS, "module", "direction"], sort=False).head(
        RULES_PER_MODULE)
    out = pd.DataFrame({
        **{c: blank_to_none(grouped[c]) for c in (*LABELS, "module", "module_path",
                                                   "direction")},
        "op": grouped["op"], "kernels": grouped["kernels"],
        "finding": "ncu_" + grouped["rule"],
        "evidence": [f"Nsight Compute's {rule} rule: {title} (estimated speedup up to "
                     f"{pct:.0f}% of the kernel, {kind})" for rule, title, pct, kind in
                     zip(grouped["rule"], grouped["title"], grouped["pct"], grouped["type"],
                         strict=True)],
        "fix": grouped["message"].map(_first_sentence),
        "est_gain_ns": grouped["gain"].astype("float64"),
        "gain_basis": "ncu_rule",
        "confidence": grouped["type"].map({"global": "medium"}).fillna("low"),
    })
    return out.reset_index(drop=True).loc[:, list(FINDING_COLUMNS)]
