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

``reason_code`` says which verdict was followed (the title's code, or the roofline's); the
numbers behind it stay in their columns, and render words them as the ``reason``
(:mod:`torch_nsight.render.reason_words`; docs/roofline.md documents the mapping and wording).
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


#: Tensor-pipe use (percent of peak, the fast set's ``tensor_pipe_pct``) under which a kernel
#: did no tensor-core work worth the name: cuDNN's direct convolutions 0.44% and 0.27%, the
#: FFMA and SIMT GEMMs of the recorded Mixtral-style experts 0.000-0.029%; tensor-core GEMMs
#: of ``gat`` and ``whisper_s`` 13% and more.
IDLE_TENSOR_PIPE_PCT = 1.0
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


#: ``reason_code``: the verdict classify followed, for each ``SOLBottleneck`` title; and
#: without one, the kernel's place under its roofline ceiling or no metrics at all.
TITLE_CODE = {SMALL_GRID: "small_grid", LATENCY_ISSUE: "latency_issue",
              HIGH_COMPUTE: "high_compute", HIGH_MEMORY: "high_memory", BALANCED: "balanced",
              HIGH_THROUGHPUT: "high_throughput"}
TITLE_OF_CODE = {code: title for title, code in TITLE_CODE.items()}
BELOW_ROOF, UNDER_ROOF, NO_METRICS = "below_roof", "under_roof", "no_metrics"


def classify_one(title: object, sm_pct: float, mem_pct: float, waves: float, side: object,
                 pct_of_roof: float, busy: dict[str, float] | None = None
                 ) -> tuple[str | None, str, str]:
    """Classify one kernel.

    Args:
        title: the stored ``SOLBottleneck`` title, or None.
        sm_pct: compute throughput, % of peak (NaN when not collected).
        mem_pct: memory throughput, % of peak (NaN when not collected).
        waves: waves per SM (NaN when unknown).
        side: ``roofline_side`` (``compute``/``memory``) or None.
        pct_of_roof: ``pct_of_roof`` (NaN when unknown).
        busy: the one-pass stand-ins (see :func:`estimate_sol`), used without SOL data.

    Returns:
        (bound, reason code, basis): the code is the title followed (:data:`TITLE_CODE`),
        :data:`BELOW_ROOF` or :data:`UNDER_ROOF` on the roofline basis, :data:`NO_METRICS`
        without any (render words it with the row's numbers:
        :mod:`torch_nsight.render.reason_words`).
    """
    for basis, candidate in (("ncu_rule", title), ("sol_pct", sol_title(sm_pct, mem_pct, waves))):
        if not isinstance(candidate, str) or not candidate:
            continue
        bound = _title_bound(candidate, sm_pct, mem_pct)
        if bound is None and basis == "ncu_rule":
            continue  # a title this version does not know: judge from the percentages
        return bound, TITLE_CODE[candidate], basis
    if busy:
        compute, _, memory, _ = estimate_sol(busy)
        estimated = sol_title(compute, memory, waves)
        if estimated is not None:
            return _title_bound(estimated, compute, memory), TITLE_CODE[estimated], "sol_estimate"
    if not pd.isna(pct_of_roof) and isinstance(side, str):
        if pct_of_roof < ROOF_LATENCY_PCT:
            return "latency", BELOW_ROOF, "roofline"
        return side, UNDER_ROOF, "roofline"
    return None, NO_METRICS, "none"


def classify(df: pd.DataFrame) -> pd.DataFrame:
    """Add ``bound``, ``reason_code`` and ``basis`` (see the module docstring).

    Args:
        df: a kernel table; uses ``sol_bottleneck``, ``sm_pct``, ``mem_pct``, ``waves``,
            ``roofline_side``, ``pct_of_roof`` and the busy counters where present.

    Returns:
        A copy with the three columns.
    """
    out = own(df)

    stand_ins = [c for c in (*COMPUTE_STAND_INS, *MEMORY_STAND_INS) if c in out]
    inputs = [c for c in ("sol_bottleneck", "sm_pct", "mem_pct", "waves", "roofline_side",
                          "pct_of_roof") if c in out]

    def verdict(row: dict[str, Any]) -> tuple[str | None, str, str]:
        return classify_one(
            row.get("sol_bottleneck"), row.get("sm_pct", np.nan), row.get("mem_pct", np.nan),
            row.get("waves", np.nan), row.get("roofline_side"), row.get("pct_of_roof", np.nan),
            {c: row[c] for c in stand_ins} if stand_ins else None)

    verdicts = each_distinct(out[[*inputs, *stand_ins]], verdict)
    bound, code, basis = zip(*verdicts, strict=True) if verdicts else ((), (), ())
    out["bound"] = pd.Series(bound, index=out.index, dtype=object)
    out["reason_code"] = pd.Series(code, index=out.index, dtype=object)
    out["basis"] = pd.Series(basis, index=out.index, dtype=object)
    return out
