"""Hotspots: the kernels or modules worth looking at first, with the code of what to try."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Literal

import numpy as np
import pandas as pd

from torch_nsight.analyze.classify import IDLE_TENSOR_PIPE_PCT, LATENCY_PCT
from torch_nsight.analyze.columns import needs
from torch_nsight.analyze.fold import STRUCTURE_COLUMN, fold_rows, with_structure
from torch_nsight.analyze.frames import (
    blank_to_none,
    dominant_values,
    filled,
    keyed,
    known_sums,
    per_run,
)
from torch_nsight.analyze.limiter import (
    LIMITER_CODES,
    REASON_INPUTS,
    VERDICT_INPUTS,
    small_grid_title,
)
from torch_nsight.analyze.rollup import (
    module_tree,
    path_keys,
    whole_counts,
)
from torch_nsight.analyze.spread import (
    RUNS_COLUMN,
    SPREAD_COLUMNS,
    add_runs,
    group_runs,
    with_spread,
)
from torch_nsight.vocabulary import KERNEL_KEYS, LABELS

HotspotOrder = Literal["headroom", "time"]
HotspotLevel = Literal["kernel", "module"]
HOTSPOT_COLUMNS = (
    "variant", "shape", "module", "module_path", "direction", "op", "kernel", "launches",
    "duration_ns", "pct_of_total", "headroom_ns", "pct_of_roof", "precision", "bound",
    "reason_facts", "basis", "next_step_code", "fused_modules", "aten_ops", *SPREAD_COLUMNS,
)


#: Kernel names of library GEMMs and convolutions (cuBLAS, CUTLASS, cuDNN, nvJet).
LIBRARY_MATMUL = re.compile(r"gemm|nvjet|cutlass|cublas|xmma|fprop|dgrad|wgrad", re.IGNORECASE)


#: Precisions of CUDA-core work (a tensor-core kernel's are ``tensor_*``).
CUDA_CORES = ("fp32", "fp64", "fp16")
#: ``next_step_code`` of a library GEMM or convolution that ran on CUDA cores and is not
#: compute-bound (those are told :data:`COMPUTE_STEPS`' ``use_tensor_cores``): tensor cores
#: come first whatever limits it (the fp32 experts' GEMMs of the recorded MoE steps were told
#: "a larger batch" under one wave beside a finding to cast them).
LIBRARY_ON_CUDA_CORES = "library_on_cuda_cores"
#: ``next_step_code`` of a latency-bound kernel with no limiter named: under one wave by
#: Nsight Compute's verdict, judged on the roofline alone (a library GEMM or convolution, or
#: another kernel), or with the speed-of-light data that rules the launch out.
LATENCY_STEPS = ("under_one_wave", "check_library_below_roof", "profile_roofline_set",
                 "profile_stalls")
#: ``next_step_code`` of memory-bound kernels: on the compute side of the DRAM roofline (a
#: library kernel far below its roof, or another kernel), on its memory side, side unknown.
MEMORY_STEPS = ("check_library_on_chip", "cut_on_chip_traffic", "cut_dram_traffic",
                "cut_memory_traffic")
#: ``next_step_code`` of compute-bound kernels: on the memory side of the DRAM roofline, on
#: CUDA cores in fp32/fp64/fp16, a library kernel far below its roof, near the roof, else.
COMPUTE_STEPS = ("cut_instructions", "use_tensor_cores", "check_library_shapes",
                 "less_work_near_roof", "less_work")
#: ``next_step_code`` without a bound (no counters); a latency-bound kernel's limiter
#: (:mod:`torch_nsight.analyze.limiter`) is its own code.
NO_COUNTERS = "no_counters"


def next_step_code(bound: object, small_grid: bool, precision: object, side: object = None,
                   pct_of_roof: float = math.nan, kernel: object = None, basis: object = None,
                   limiter: object = None, cuda_cores: object = False) -> str:
    """Return the code of what to look at next for a kernel of this class (render words it:
    :mod:`torch_nsight.render.hotspot_words`).

    Only a kernel on the memory side of the DRAM roofline is told to cut DRAM traffic: one
    that ncu calls memory-bound (its L1, L2 or DRAM is busy) but whose FLOP per DRAM byte is
    above the ridge point is told to cut on-chip traffic instead.

    Args:
        bound: ``memory``, ``compute``, ``latency`` or None.
        small_grid: whether the classification was Nsight Compute's ``Small Grid`` verdict
            (:func:`~torch_nsight.analyze.limiter.small_grid_title`).
        precision: the kernel's dominant precision.
        side: ``roofline_side`` (``compute``/``memory``), None when unknown.
        pct_of_roof: ``pct_of_roof``, NaN when unknown.
        kernel: the kernel's name, to recognise a library GEMM or convolution.
        basis: the classification's basis (``roofline``: judged without speed-of-light data).
        limiter: what limits a latency-bound kernel's launch (``limiter``, see
            :mod:`torch_nsight.analyze.limiter`), None when nothing does or unknown.
        cuda_cores: whether the kernel's work ran on CUDA cores (:func:`on_cuda_cores`).

    Returns:
        The limiter's name for a latency-bound kernel with one, else one of
        :data:`LATENCY_STEPS`, :data:`MEMORY_STEPS`, :data:`COMPUTE_STEPS` or
        :data:`NO_COUNTERS`.
    """
    low = not pd.isna(pct_of_roof) and pct_of_roof < LATENCY_PCT
    library = isinstance(kernel, str) and LIBRARY_MATMUL.search(kernel) is not None
    if library and isinstance(cuda_cores, (bool, np.bool_)) and cuda_cores \
            and bound in ("latency", "memory"):
        return LIBRARY_ON_CUDA_CORES
    if bound == "latency":
        if limiter in LIMITER_CODES:
            return limiter  # type: ignore[return-value]
        if small_grid is True:
            return "under_one_wave"
        if basis == "roofline":  # judged from the roofline alone: no speed-of-light data
            return "check_library_below_roof" if library else "profile_roofline_set"
        return "profile_stalls"
    if bound == "memory":
        if side == "compute":
            return "check_library_on_chip" if library and low else "cut_on_chip_traffic"
        return "cut_dram_traffic" if side == "memory" else "cut_memory_traffic"
    if bound == "compute":
        if side == "memory":
            return "cut_instructions"
        if precision in CUDA_CORES:
            return "use_tensor_cores"
        if library and low:
            return "check_library_shapes"
        if side == "compute" and not pd.isna(pct_of_roof) and not low:
            return "less_work_near_roof"
        return "less_work"
    return NO_COUNTERS


class _Facts:
    """The launches of a kernel table that carry a site's reason (those with the site's
    bound), with their site's number: the facts of chosen sites are computed when asked
    (:meth:`of`), so a ranking computes them only for the rows it keeps."""

    def __init__(self, df: pd.DataFrame, work: pd.DataFrame, codes: np.ndarray,
                 agrees: np.ndarray) -> None:
        self._df, self._work, self._codes, self._agrees = df, work, codes, agrees

    def of(self, sites: Sequence[int]) -> pd.Series:
        """The ``reason_facts`` of the sites numbered ``sites`` (:func:`_reason_facts`),
        one per number, NaN for a site no launch agrees with."""
        wanted = np.asarray(sites, dtype=np.int64)
        rows = self._agrees & np.isin(self._codes, wanted)
        facts = _reason_facts(self._df, self._work, self._codes, rows)
        return pd.Series(facts.reindex(wanted).to_numpy(), dtype=object)


def _reason_facts(df: pd.DataFrame, work: pd.DataFrame, codes: np.ndarray,
                  agrees: np.ndarray) -> pd.Series:
    """Per site number (``codes`` of the rows, among those ``agrees`` selects), each
    distinct set of the reason's codes and numbers among the launches with the site's
    bound, with the time (ns) it holds: ``(columns, ((time, values), ...))``, in the order
    first seen, missing values None (a row not latency-bound keeps classify's columns
    alone). Render words each and shows the words that hold the most time. A table saved
    before the codes keeps its words (column ``said``) instead::

        module  kernel   ...          module  kernel  reason_facts
        attn    gemm_a           ->   attn    gemm_a  (("reason_code", "bound", ...),
        attn    gemm_a                                 ((2.1e5, ("high_compute", ...)), ...))
    """
    columns = ([c for c in REASON_INPUTS if c in df] if "reason_code" in df
               else ["reason"] if "reason" in df else [])
    names = ("said",) if columns == ["reason"] else tuple(columns)
    rows = np.flatnonzero(agrees)
    latency = (df["bound"].to_numpy()[rows] == "latency").tolist() if "bound" in df \
        else [False] * len(rows)
    verdict = [c in VERDICT_INPUTS or c == "reason" for c in columns]
    values = zip(*(df[c].to_numpy()[rows].tolist() for c in columns), strict=True) \
        if columns else iter([()] * len(rows))
    weights = pd.to_numeric(work["duration_ns"], errors="coerce").fillna(0.0).to_numpy()[rows]
    held: dict[int, dict[tuple, float]] = {}
    for site, value, weight, slow in zip(codes[rows].tolist(), values, weights.tolist(),
                                         latency, strict=True):
        fact = tuple(None if v is None or (isinstance(v, float) and v != v)
                     or not (slow or kept) else v for v, kept in zip(value, verdict, strict=True))
        facts = held.setdefault(site, {})
        facts[fact] = facts.get(fact, 0.0) + weight
    return pd.Series({site: (names, tuple((weight, fact) for fact, weight in facts.items()))
                      for site, facts in held.items()}, dtype=object)


@needs("module", "module_path", "kernel", "duration_ns")
def _first_fused(df: pd.DataFrame, work: pd.DataFrame, keys: list[str]) -> pd.Series:
    """Per site, the modules its first launch fused (``fused_modules``), else None."""
    if "fused_modules" not in df:
        index = work.groupby(keys, sort=False).size().index
        return pd.Series([None] * len(index), index=index, dtype=object)
    fused = df["fused_modules"].map(lambda m: tuple(m) if isinstance(m, (tuple, list))
                                    and len(m) else None)
    return fused.groupby([work[k] for k in keys], sort=False).agg(
        lambda s: next((m for m in s if m is not None), None))


def kernel_hotspots(df: pd.DataFrame, keep_runs: bool = False) -> pd.DataFrame:
    """Aggregate identical launches (same labels, module, direction, op and kernel name).

    Args:
        df: an attributed, classified kernel table.
        keep_runs: keep each site's per-run times (``run_ns``, see
            :mod:`torch_nsight.analyze.spread`).

    Returns:
        One row per distinct kernel site with :data:`HOTSPOT_COLUMNS`, unsorted; times are
        per run (their spread over the runs in the spread columns) and ``pct_of_roof`` is
        time-weighted; ``fused_modules`` names the modules a kernel fused across modules
        computed for (compiled code; None otherwise).
    """
    out, facts = _kernel_sites(df, keep_runs)
    return _with_facts(out, facts)


def _with_facts(table: pd.DataFrame, facts: _Facts) -> pd.DataFrame:
    """``table`` with each row's site number (column ``reason_facts``, as
    :func:`_kernel_sites` leaves it) replaced by the site's facts."""
    return table.assign(reason_facts=facts.of(table["reason_facts"].tolist()).to_numpy())


def on_cuda_cores(df: pd.DataFrame) -> pd.Series:
    """Whether each launch did floating-point work on CUDA cores: a CUDA-core precision with
    FLOPs, and its tensor pipe idle where the fast set measured it (the calls table gives a
    site's other kernels fp32 and 0 FLOPs; cuDNN's fp16 RNN GEMMs, 79% busy, and its flash
    attention, 10%, are neither)."""
    flops = pd.to_numeric(df["flops"], errors="coerce") if "flops" in df else np.nan
    pipe = (pd.to_numeric(df["tensor_pipe_pct"], errors="coerce") if "tensor_pipe_pct" in df
            else pd.Series(np.nan, index=df.index))
    return (df["precision"].isin(CUDA_CORES) & (flops > 0)
            & ~(pipe >= IDLE_TENSOR_PIPE_PCT)).astype(bool)


def _by_site(out: pd.DataFrame, values: np.ndarray) -> pd.Series:
    """``values`` (one per site, in site order) as a column of ``out``, blanks None."""
    return blank_to_none(pd.Series(values, index=out.index, dtype=object))


def _kernel_sites(df: pd.DataFrame, keep_runs: bool) -> tuple[pd.DataFrame, _Facts]:
    """:func:`kernel_hotspots` with each site's number in ``reason_facts`` in place of its
    facts, and what computes them (:meth:`_Facts.of`): a ranking computes the facts of the
    rows it keeps alone."""
    keys = list(KERNEL_KEYS)
    work = keyed(df, keys, ["duration_ns", "headroom_ns", "roof_time_ns", "precision", "bound",
                            "basis", "roofline_side", "limiter", "sol_bottleneck",
                            "sm_pct", "mem_pct", "waves"])
    # only a launch classified on Nsight Compute's rule or SOL percentages may be one
    judged = work["basis"].isin(["ncu_rule", "sol_pct", "sol_estimate"]).to_numpy()
    small_grid = np.zeros(len(work), dtype=bool)
    small_grid[judged] = [small_grid_title(row) for row in work.loc[judged, [
        "bound", "basis", "sol_bottleneck", "sm_pct", "mem_pct", "waves"]].to_dict("records")]
    work["small_grid"] = small_grid
    groups = work.groupby(keys, sort=False)
    codes = groups.ngroup().to_numpy()  # each row's site, grouped once for every column
    out = groups.agg(launches=("duration_ns", "size"), duration_ns=("duration_ns", "sum"))
    out[["headroom_ns", "roof_time_ns"]] = known_sums(groups, ["headroom_ns", "roof_time_ns"])
    # row g of ``out`` is site g: the dominant values come in that order
    for column in ("precision", "bound", "roofline_side"):
        out[column] = _by_site(out, dominant_values(work, column, codes, len(out)))
    # the evidence shown is that of the launches with the site's bound: launches whose
    # reasons differ by a percent must not outvote the bound with one repeated reason
    agrees = filled(work["bound"]).to_numpy() == filled(out["bound"]).to_numpy()[codes]
    for column in ("basis", "limiter", "small_grid"):
        out[column] = _by_site(out, dominant_values(
            work.loc[agrees, [column, "duration_ns"]], column, codes[agrees], len(out)))
    cuda = on_cuda_cores(df).to_numpy()
    out["cuda_cores"] = np.bincount(codes, weights=cuda, minlength=len(out)) > 0
    out["reason_facts"] = np.arange(len(out))  # the site's number, until its facts
    out["fused_modules"] = _first_fused(df, work, keys)
    out["aten_ops"] = (_by_site(out, dominant_values(work.assign(aten_ops=df["aten_ops"]),
                                                     "aten_ops", codes, len(out)))
                       if "aten_ops" in df else None)
    out = out.reset_index()
    out[RUNS_COLUMN] = group_runs(df, codes, len(out))
    out = per_run(out, df, LABELS, ["launches", "duration_ns", "headroom_ns", "roof_time_ns"])
    out = out.drop(columns="runs")
    totals = out.groupby(list(LABELS))["duration_ns"].transform("sum")
    out["pct_of_total"] = 100.0 * out["duration_ns"] / totals
    out["pct_of_roof"] = 100.0 * out["roof_time_ns"] / out["duration_ns"]
    out["next_step_code"] = [next_step_code(*row) for row in zip(
        out["bound"], out["small_grid"], out["precision"], out["roofline_side"],
        out["pct_of_roof"], out["kernel"], out["basis"], out["limiter"], out["cuda_cores"],
        strict=True)]
    out = out.drop(columns="cuda_cores")
    for column in KERNEL_KEYS:
        out[column] = blank_to_none(out[column])
    out = whole_counts(with_spread(out, keep_runs=keep_runs), ("launches",))
    columns = [*HOTSPOT_COLUMNS, RUNS_COLUMN] if keep_runs else list(HOTSPOT_COLUMNS)
    return out.loc[:, columns], _Facts(df, work, codes, agrees)


def hotspots(df: pd.DataFrame, n: int = 10, order: HotspotOrder = "headroom",
             level: HotspotLevel = "kernel", fold: bool = True) -> pd.DataFrame:
    """Rank kernels or modules by recoverable time or by time.

    Args:
        df: an attributed, classified kernel table.
        n: how many rows to return.
        order: ``headroom`` (time recoverable at the roofline ceiling; kernels without a
            ceiling rank after those with one) or ``time``.
        level: ``kernel`` (identical launches aggregated, see :func:`kernel_hotspots`) or
            ``module`` (each module's own, exclusive, time and headroom).
        fold: fold kernel sites that differ only by the index of a repeated block into one
            row before ranking (:func:`torch_nsight.analyze.fold.fold_rows`; column
            ``blocks``).

    Returns:
        The top ``n`` rows, best first, with their bound, the facts of their reason
        (``reason_facts``, kernels only) and ``next_step_code`` (render words both:
        :mod:`torch_nsight.render.hotspot_words`).

    Raises:
        ValueError: an argument is out of range.
    """
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise ValueError(f"n must be a positive integer, got {n!r}")
    if order not in ("headroom", "time"):
        raise ValueError(f"order must be 'headroom' or 'time', got {order!r}")
    if level not in ("kernel", "module"):
        raise ValueError(f"level must be 'kernel' or 'module', got {level!r}")
    facts = None  # the kernel sites' reasons, computed for the rows kept
    if level == "kernel":
        table, facts = _kernel_sites(df, keep_runs=True)
        if fold:  # blocks that launched the same kernels, the same way
            table = fold_rows(with_structure(table, df),
                              keys=[*LABELS, "direction", "op", "kernel", STRUCTURE_COLUMN],
                              sums=("launches", "duration_ns", "headroom_ns", "pct_of_total",
                                    RUNS_COLUMN),
                              weighted={"pct_of_roof": "duration_ns"}
                              ).drop(columns=[STRUCTURE_COLUMN])
        table = with_spread(table)
        key = "headroom_ns" if order == "headroom" else "duration_ns"
    else:
        table = module_tree(df)
        table = table[table["exclusive_kernels"] > 0].copy()
        # the spread of the time ranked here, each module's own (exclusive) time
        keys = [*LABELS, "direction", "module_path"]
        table = with_spread(add_runs(table, df, keys, on=[*LABELS, "direction", "module_path"],
                                     group_keys=path_keys(df, keys)))
        table["next_step_code"] = [next_step_code(b, False, None) for b in table["bound"]]
        key = "exclusive_headroom_ns" if order == "headroom" else "exclusive_ns"
    time = "duration_ns" if level == "kernel" else "exclusive_ns"
    table = table.sort_values([key, time], ascending=False, na_position="last", kind="stable")
    table = table.head(n).reset_index(drop=True)
    return table if facts is None else _with_facts(table, facts)
