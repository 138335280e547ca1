"""Bound classification: ``memory``, ``compute`` or ``latency`` per kernel, and why.

The verdict follows Nsight Compute's own ``SOLBottleneck`` rule (section SpeedOfLight)
wherever it can, in this order of ``basis``:

* ``ncu_rule``: the rule's title stored in the report;
* ``sol_pct``: the rule re-applied to ``sm_pct``/``mem_pct`` with its own thresholds;
* ``sol_estimate``: the rule re-applied to one-pass stand-ins for those two percentages (the
  fast tier): compute = the busier of SM issue and the tensor pipe, memory = the busier of
  DRAM and L1's load/store pipe. On two real models on the H200 this agreed with the SOL
  verdict on 100% and 98.7% of GPU time (bench/bound_calibration.py, docs/roofline.md);
* ``roofline``: the kernel's distance to its roofline ceiling;
* ``none``: nothing to judge from (``bound`` is None).

The ``reason`` gives the evidence for ``bound`` (the SOL percentages, limiting side first,
naming the units ncu's memory percentage covers), then the kernel's place on the DRAM
roofline as a separate, labelled fact. docs/roofline.md documents the mapping and wording.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from torch_nsight.analyze.frames import each_distinct, own

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


#: The units ncu's memory throughput (``mem_pct``) covers: its busiest memory unit.
MEMORY_UNITS = "L1/L2/DRAM"


def _pct(value: float, below: float = math.inf) -> str:
    """A whole percentage; one decimal, rounded down, where rounding would reach ``below``."""
    if 0 < value < 0.5:
        return "<1%"
    if value < below <= round(value):
        return f"{math.floor(value * 10) / 10:.1f}%"
    return f"{value:.0f}%"


def _compare(first: float, second: float) -> tuple[str, str, str]:
    """Both percentages and the sign between them; a decimal where whole numbers tie."""
    sign = ">" if first > second else "<" if first < second else "="
    if f"{first:.0f}" == f"{second:.0f}" and first != second:
        return f"{first:.1f}%", sign, f"{second:.1f}%"
    return _pct(first), sign, _pct(second)


def _waves(waves: float) -> str:
    if waves < 0.01:
        return "<0.01"
    return f"{waves:.2g}" if waves < 0.95 else f"{waves:.3g}"  # 0.996 stays under one


def roof_name(side: object, precision: object = None) -> str:
    """Name the roofline ceiling a kernel sits under: ``DRAM roof``, ``bf16 tensor roof``...

    Args:
        side: ``roofline_side`` (``compute``/``memory``) or None.
        precision: the kernel's dominant precision (``tensor_bf16``, ``fp32``...) or None.

    Returns:
        The roof's name; ``roof`` when the side is unknown.
    """
    if side == "memory":
        return "DRAM roof"
    if side != "compute":
        return "roof"
    if isinstance(precision, str) and precision.startswith("tensor_"):
        return f"{precision.removeprefix('tensor_')} tensor roof"
    if isinstance(precision, str) and precision != "none":
        return f"{precision} roof"
    return "compute roof"


#: How the reason's DRAM roofline clause starts.
ROOF_CLAUSE = "DRAM roofline: "


def _roof_fact(side: object, pct: float, precision: object) -> str:
    """The DRAM roofline position, labelled as such: ``DRAM roofline: 10% of bf16 tensor
    roof``; empty when unknown."""
    if pd.isna(pct):
        return ""
    return f"{ROOF_CLAUSE}{_pct(pct, ROOF_LATENCY_PCT)} of {roof_name(side, precision)}"


def _sol_evidence(title: str, sm_pct: float, mem_pct: float, waves: float,
                  bound: str | None) -> str:
    """The SOL percentages behind a rule's title, the limiting side first."""
    if pd.isna(sm_pct) or pd.isna(mem_pct):
        return f"ncu rule: {title.lower()}"
    if title in (SMALL_GRID, LATENCY_ISSUE):
        mem, sm = _pct(mem_pct, LATENCY_PCT), _pct(sm_pct, LATENCY_PCT)
        if title == LATENCY_ISSUE:
            return f"SOL memory {mem}, compute {sm}, both < {LATENCY_PCT:.0f}%"
        grid = "small grid" if pd.isna(waves) else f"small grid ({_waves(waves)} waves)"
        return f"{grid}, SOL memory {mem}, compute {sm}"
    if bound == "memory":
        mem, sign, sm = _compare(mem_pct, sm_pct)
        pair = f"memory {mem} {sign} compute {sm}"
    else:
        sm, sign, mem = _compare(sm_pct, mem_pct)
        pair = f"compute {sm} {sign} memory {mem}"
    return f"SOL {pair} ({MEMORY_UNITS})" + (", balanced" if title == BALANCED else "")


#: The stand-ins of each SOL percentage: column -> the unit it names in the evidence.
COMPUTE_STAND_INS = {"sm_issue_pct": "SM issue", "tensor_pipe_pct": "tensor pipe"}
MEMORY_STAND_INS = {"dram_busy_pct": "DRAM", "l1_lsu_pct": "L1"}


def estimate_sol(busy: dict[str, float]) -> tuple[float, str, float, str]:
    """The compute and memory SOL estimates from the one-pass busy counters.

    Args:
        busy: column -> value for the columns of :data:`COMPUTE_STAND_INS` and
            :data:`MEMORY_STAND_INS` (NaN where not collected).

    Returns:
        (compute %, the unit that sets it, memory %, the unit that sets it); a percentage is
        NaN when none of its stand-ins was collected.
    """
    def busiest(columns: dict[str, str]) -> tuple[float, str]:
        found = [(busy.get(c, math.nan), unit) for c, unit in columns.items()]
        found = [(v, unit) for v, unit in found if not pd.isna(v)]
        return max(found) if found else (math.nan, "")

    compute, compute_unit = busiest(COMPUTE_STAND_INS)
    memory, memory_unit = busiest(MEMORY_STAND_INS)
    return compute, compute_unit, memory, memory_unit


def _estimate_evidence(title: str, compute: float, compute_unit: str, memory: float,
                       memory_unit: str, waves: float, bound: str | None) -> str:
    """``SOL estimate: compute 83% (tensor pipe) > memory 26% (DRAM)`` and the like."""
    sm = f"compute {_pct(compute, LATENCY_PCT)} ({compute_unit})"
    mem = f"memory {_pct(memory, LATENCY_PCT)} ({memory_unit})"
    if title in (SMALL_GRID, LATENCY_ISSUE):
        grid = "" if title == LATENCY_ISSUE or pd.isna(waves) else f"small grid ({_waves(waves)} waves), "
        return f"SOL estimate: {grid}{mem}, {sm}, both < {LATENCY_PCT:.0f}%"
    first, second = (mem, sm) if bound == "memory" else (sm, mem)
    sign = "=" if compute == memory else ">"
    return f"SOL estimate: {first} {sign} {second}" + (", balanced" if title == BALANCED else "")


def classify_one(title: object, sm_pct: float, mem_pct: float, waves: float, side: object,
                 pct_of_roof: float, precision: object = None,
                 busy: dict[str, float] | None = None) -> tuple[str | None, str, str]:
    """Classify one kernel.

    The reason gives the evidence for the bound, then the DRAM roofline position as a
    separate fact: ``SOL memory 96% > compute 19% (L1/L2/DRAM); DRAM roofline: 10% of bf16
    tensor roof`` (docs/roofline.md lists every form).

    Args:
        title: the stored ``SOLBottleneck`` title, or None.
        sm_pct: compute throughput, % of peak (NaN when not collected).
        mem_pct: memory throughput, % of peak (NaN when not collected).
        waves: waves per SM (NaN when unknown).
        side: ``roofline_side`` (``compute``/``memory``) or None.
        pct_of_roof: ``pct_of_roof`` (NaN when unknown).
        precision: the kernel's dominant precision, to name its compute roof (optional).
        busy: the one-pass stand-ins (see :func:`estimate_sol`), used without SOL data.

    Returns:
        (bound, reason, basis).
    """
    roof = _roof_fact(side, pct_of_roof, precision)
    for basis, candidate in (("ncu_rule", title), ("sol_pct", sol_title(sm_pct, mem_pct, waves))):
        if not isinstance(candidate, str) or not candidate:
            continue
        bound = _title_bound(candidate, sm_pct, mem_pct)
        if bound is None and basis == "ncu_rule":
            continue  # a title this version does not know: judge from the percentages
        evidence = _sol_evidence(candidate, sm_pct, mem_pct, waves, bound)
        return bound, evidence + (f"; {roof}" if roof else ""), basis
    if busy:
        compute, compute_unit, memory, memory_unit = estimate_sol(busy)
        estimated = sol_title(compute, memory, waves)
        if estimated is not None:
            bound = _title_bound(estimated, compute, memory)
            evidence = _estimate_evidence(estimated, compute, compute_unit, memory,
                                          memory_unit, waves, bound)
            return bound, evidence + (f"; {roof}" if roof else ""), "sol_estimate"
    if not pd.isna(pct_of_roof) and isinstance(side, str):
        if pct_of_roof < ROOF_LATENCY_PCT:
            return "latency", f"{roof}, < {ROOF_LATENCY_PCT:.0f}%", "roofline"
        return side, roof, "roofline"
    return None, "no SOL or roofline metrics", "none"


def classify(df: pd.DataFrame) -> pd.DataFrame:
    """Add ``bound``, ``reason`` and ``basis`` (see the module docstring).

    Args:
        df: a kernel table; uses ``sol_bottleneck``, ``sm_pct``, ``mem_pct``, ``waves``,
            ``roofline_side``, ``pct_of_roof``, ``precision`` and the busy counters where
            present.

    Returns:
        A copy with the three columns.
    """
    out = own(df)

    stand_ins = [c for c in (*COMPUTE_STAND_INS, *MEMORY_STAND_INS) if c in out]
    inputs = [c for c in ("sol_bottleneck", "sm_pct", "mem_pct", "waves", "roofline_side",
                          "pct_of_roof", "precision") if c in out]

    def verdict(row: dict[str, Any]) -> tuple[str | None, str, str]:
        return classify_one(
            row.get("sol_bottleneck"), row.get("sm_pct", np.nan), row.get("mem_pct", np.nan),
            row.get("waves", np.nan), row.get("roofline_side"), row.get("pct_of_roof", np.nan),
            row.get("precision"), {c: row[c] for c in stand_ins} if stand_ins else None)

    verdicts = each_distinct(out[[*inputs, *stand_ins]], verdict)
    bound, reason, basis = zip(*verdicts, strict=True) if verdicts else ((), (), ())
    out["bound"] = pd.Series(bound, index=out.index, dtype=object)
    out["reason"] = pd.Series(reason, index=out.index, dtype=object)
    out["basis"] = pd.Series(basis, index=out.index, dtype=object)
    return out
