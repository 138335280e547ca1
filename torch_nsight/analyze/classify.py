"""Bound classification: ``memory``, ``compute`` or ``latency`` per kernel, and why.

The verdict follows Nsight Compute's own ``SOLBottleneck`` rule (section SpeedOfLight)
wherever it can, in this order of ``basis``:

* ``ncu_rule``: the rule's title stored in the report;
* ``sol_pct``: the rule re-applied to ``sm_pct``/``mem_pct`` with its own thresholds;
* ``roofline``: the kernel's distance to its roofline ceiling;
* ``none``: nothing to judge from (``bound`` is None).

docs/roofline.md documents the mapping.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

# The SOLBottleneck rule's thresholds (percent of peak), as in ncu's sections/*.py.
HIGH_THROUGHPUT_PCT = 80.0
LATENCY_PCT = 60.0
BALANCED_PCT = 10.0
WAVES = 1.0
# Below this share of its roofline ceiling a kernel is judged latency-bound (roofline basis).
ROOF_LATENCY_PCT = LATENCY_PCT

SMALL_GRID = "Small Grid"
LATENCY_ISSUE = "Latency Issue"
HIGH_COMPUTE = "High Compute Throughput"
HIGH_MEMORY = "High Memory Throughput"
BALANCED = "Balanced Throughput"
HIGH_THROUGHPUT = "High Throughput"
# Rule title -> bound; None: the side with the higher SOL percentage (as the rule's text says).
TITLE_BOUND: dict[str, str | None] = {
    SMALL_GRID: "latency",
    LATENCY_ISSUE: "latency",
    HIGH_COMPUTE: "compute",
    HIGH_MEMORY: "memory",
    BALANCED: None,
    HIGH_THROUGHPUT: None,
}


def sol_title(sm_pct: float, mem_pct: float, waves: float = float("nan")) -> str | None:
    """Return the title Nsight Compute's ``SOLBottleneck`` rule gives these percentages.

    Args:
        sm_pct: ``sm__throughput.avg.pct_of_peak_sustained_elapsed``.
        mem_pct: ``gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed``.
        waves: ``launch__waves_per_multiprocessor`` (NaN when unknown).

    Returns:
        The rule's title, or None when a percentage is missing.
    """
    if pd.isna(sm_pct) or pd.isna(mem_pct):
        return None
    if sm_pct < HIGH_THROUGHPUT_PCT and mem_pct < HIGH_THROUGHPUT_PCT:
        if sm_pct < LATENCY_PCT and mem_pct < LATENCY_PCT:
            return SMALL_GRID if not pd.isna(waves) and waves < WAVES else LATENCY_ISSUE
        if abs(sm_pct - mem_pct) >= BALANCED_PCT:
            return HIGH_COMPUTE if sm_pct > mem_pct else HIGH_MEMORY
        return BALANCED
    return HIGH_THROUGHPUT


def _title_bound(title: str, sm_pct: float, mem_pct: float) -> str | None:
    if title not in TITLE_BOUND:
        return None
    bound = TITLE_BOUND[title]
    if bound is None and not (pd.isna(sm_pct) or pd.isna(mem_pct)):
        bound = "memory" if mem_pct > sm_pct else "compute"
    return bound


def _roof_note(side: object, pct: float) -> str:
    if pd.isna(pct):
        return ""
    return f"{side} side, {pct:.0f}% of roof" if isinstance(side, str) else f"{pct:.0f}% of roof"


def classify_one(title: object, sm_pct: float, mem_pct: float, waves: float, side: object,
                 pct_of_roof: float) -> tuple[str | None, str, str]:
    """Classify one kernel.

    Args:
        title: the stored ``SOLBottleneck`` title, or None.
        sm_pct: compute throughput, % of peak (NaN when not collected).
        mem_pct: memory throughput, % of peak (NaN when not collected).
        waves: waves per SM (NaN when unknown).
        side: ``roofline_side`` (``compute``/``memory``) or None.
        pct_of_roof: ``pct_of_roof`` (NaN when unknown).

    Returns:
        (bound, reason, basis).
    """
    note = _roof_note(side, pct_of_roof)
    for basis, candidate in (("ncu_rule", title), ("sol_pct", sol_title(sm_pct, mem_pct, waves))):
        if not isinstance(candidate, str) or not candidate:
            continue
        bound = _title_bound(candidate, sm_pct, mem_pct)
        if bound is None and basis == "ncu_rule":
            continue  # a title this version does not know: judge from the percentages
        reason = candidate.lower() + (f" ({note})" if note else "")
        return bound, reason, basis
    if not pd.isna(pct_of_roof) and isinstance(side, str):
        if pct_of_roof < ROOF_LATENCY_PCT:
            return "latency", f"{pct_of_roof:.0f}% of roof ({side} side)", "roofline"
        return side, f"{pct_of_roof:.0f}% of {side} roof", "roofline"
    return None, "no SOL or roofline metrics", "none"


def classify(df: pd.DataFrame) -> pd.DataFrame:
    """Add ``bound``, ``reason`` and ``basis`` (see the module docstring).

    Args:
        df: a kernel table; uses ``sol_bottleneck``, ``sm_pct``, ``mem_pct``, ``waves``,
            ``roofline_side`` and ``pct_of_roof`` where present.

    Returns:
        A copy with the three columns.
    """
    out = df.copy()

    def column(name: str, fill: object = np.nan) -> list[object]:
        return out[name].tolist() if name in out else [fill] * len(out)

    verdicts = [classify_one(*row) for row in zip(
        column("sol_bottleneck", None), column("sm_pct"), column("mem_pct"), column("waves"),
        column("roofline_side", None), column("pct_of_roof"), strict=True)]
    bound, reason, basis = zip(*verdicts, strict=True) if verdicts else ((), (), ())
    out["bound"] = pd.Series(bound, index=out.index, dtype=object)
    out["reason"] = pd.Series(reason, index=out.index, dtype=object)
    out["basis"] = pd.Series(basis, index=out.index, dtype=object)
    return out
