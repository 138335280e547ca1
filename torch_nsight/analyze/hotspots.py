"""Hotspots: the kernels or modules worth looking at first, with a hint of what to try."""

from __future__ import annotations

import math
import re
from typing import Literal

import pandas as pd

from torch_nsight.analyze.classify import LATENCY_PCT
from torch_nsight.analyze.columns import needs
from torch_nsight.analyze.fold import STRUCTURE_COLUMN, fold_rows, with_structure
from torch_nsight.analyze.frames import blank_to_none, dominant, filled, keyed, known_sums, per_run
from torch_nsight.analyze.limiter import small_grid_title
from torch_nsight.analyze.rollup import (
    module_tree,
    path_keys,
    whole_counts,
)
from torch_nsight.analyze.spread import RUNS_COLUMN, SPREAD_COLUMNS, add_runs, with_spread
from torch_nsight.vocabulary import KERNEL_KEYS, LABELS

HotspotOrder = Literal["headroom", "time"]
HotspotLevel = Literal["kernel", "module"]
HOTSPOT_COLUMNS = (
    "variant", "shape", "module", "module_path", "direction", "op", "kernel", "launches",
    "duration_ns", "pct_of_total", "headroom_ns", "pct_of_roof", "precision", "bound",
    "reason", "basis", "next_step", "fused_modules", "aten_ops", *SPREAD_COLUMNS,
)


#: Kernel names of library GEMMs and convolutions (cuBLAS, CUTLASS, cuDNN, nvJet).
LIBRARY_MATMUL = re.compile(r"gemm|nvjet|cutlass|cublas|xmma|fprop|dgrad|wgrad", re.IGNORECASE)


#: What to change for each launch limiter of a latency-bound kernel (analyze/limiter.py),
#: the action first, then the limiter's name (its numbers are in the reason).
LIMITER_FIX = {
    "small_grid": "give it more work (a larger batch) or fuse it (torch.compile): under "
                  "one wave",
    "tail": "fill whole waves (batch, sequence length) or fuse it (torch.compile): "
            "a partial last wave",
    "registers": "try another kernel or backend (torch.compile, SDPA/cuDNN backend, "
                 "dtype): occupancy limited by registers",
    "shared_memory": "try another kernel or backend (torch.compile, SDPA/cuDNN backend, "
                     "dtype): occupancy limited by shared memory",
    "block_size": "try another kernel or backend (torch.compile): occupancy limited by its "
                  "block size",
    "blocks_per_sm": "fuse it (torch.compile) or use another kernel: blocks too small to "
                     "fill an SM",
    # causes named from the warp states (profile --stalls: analyze/stalls.py)
    "launch_overhead": "cut launches: CUDA graphs (torch.compile(mode='reduce-overhead')) or "
                       "fuse it with its neighbours (torch.compile): a launch of a few µs",
    "few_warps": "give it more work (a larger batch) or fuse it (torch.compile): achieved "
                 "occupancy far below theoretical",
    "waiting_warps": "fuse it with its neighbours (torch.compile), feed it contiguous or "
                     "channels-last tensors: its warps wait (profile --stalls tells on what)",
    "memory_latency": "fuse it with its neighbours (torch.compile), feed it contiguous or "
                      "channels-last tensors: warps wait on global memory",
    "synchronization": "try another kernel or backend (torch.compile, cudnn.benchmark, SDPA "
                       "backend): warps wait at barriers",
    "instruction_issue": "cut instructions or pick another kernel (torch.compile, "
                         "cudnn.benchmark, a lower precision): instruction issue or a math "
                         "pipe is the limit",
    "shared_memory_access": "try another kernel or backend (torch.compile, cudnn.benchmark): "
                            "warps wait on shared memory",
}


def next_step(bound: object, small_grid: bool, precision: object, side: object = None,
              pct_of_roof: float = math.nan, kernel: object = None, basis: object = None,
              limiter: object = None) -> str:
    """Return a short hint of what to look at next for a kernel of this class.

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

    Returns:
        One line of advice, the action first.
    """
    low = not pd.isna(pct_of_roof) and pct_of_roof < LATENCY_PCT
    library = isinstance(kernel, str) and LIBRARY_MATMUL.search(kernel) is not None
    if bound == "latency":
        if isinstance(limiter, str) and limiter in LIMITER_FIX:
            return LIMITER_FIX[limiter]
        if small_grid is True:
            return "fuse it or give it more blocks (batch, split-K): under one wave"
        if basis == "roofline":  # judged from the roofline alone: no speed-of-light data
            if library:
                return ("check shapes, alignment and dtype: far below its roof (the roofline "
                        "metric set tells an L1/L2 limit from latency)")
            return ("far below its roof: profile it with the roofline metric set to tell an "
                    "L1/L2 limit from latency (occupancy, stalls)")
        return ("profile it with metric_set='full' to see its stalls (WarpStateStats): the "
                "launch is not the limit")
    if bound == "memory":
        if side == "compute":
            if library and low:
                return ("check shapes, alignment and dtype: L1/L2-bound, the DRAM roofline is "
                        "not the limit")
            return ("cut L1/L2 traffic (reuse, tiling, shared memory): the DRAM roofline is "
                    "not the limit")
        if side == "memory":
            return "cut DRAM traffic: fuse with neighbours, lower-precision data, avoid copies"
        return ("cut memory traffic (fuse, avoid copies): MemoryWorkloadAnalysis names "
                "the busy unit")
    if bound == "compute":
        if side == "memory":
            return ("cut instructions (index math, conversions): SM busy, few FLOPs per "
                    "DRAM byte")
        if precision in ("fp32", "fp64", "fp16"):
            return f"move the work to tensor cores: compute-bound on CUDA cores ({precision})"
        if library and low:
            return "check GEMM/conv shapes, alignment and dtype: far below its FLOP roof"
        if side == "compute" and not pd.isna(pct_of_roof) and not low:
            return "do less work or use a lower precision: near the FLOP roof"
        return "do less work or use a lower precision: compute-bound"
    return ("no counters (a trace, or --metric-set duration): profile it under Nsight "
            "Compute (torch_nsight.sweep, torch-nsight profile) to classify it")


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
    keys = list(KERNEL_KEYS)
    work = keyed(df, keys, ["duration_ns", "headroom_ns", "roof_time_ns", "precision", "bound",
                            "reason", "basis", "roofline_side", "limiter", "sol_bottleneck",
                            "sm_pct", "mem_pct", "waves"])
    work["small_grid"] = [small_grid_title(row) for row in work[
        ["bound", "basis", "sol_bottleneck", "sm_pct", "mem_pct", "waves"]].to_dict("records")]
    groups = work.groupby(keys, sort=False)
    codes = groups.ngroup().to_numpy()  # each row's site, grouped once for every column
    out = groups.agg(launches=("duration_ns", "size"), duration_ns=("duration_ns", "sum"))
    out[["headroom_ns", "roof_time_ns"]] = known_sums(groups, ["headroom_ns", "roof_time_ns"])
    for column in ("precision", "bound", "roofline_side"):
        out[column] = blank_to_none(dominant(work, keys, column, groups=codes))
    # the evidence shown is that of the launches with the site's bound: launches whose
    # reasons differ by a percent must not outvote the bound with one repeated reason
    agrees = filled(work["bound"]).to_numpy() == filled(out["bound"]).reindex(
        pd.MultiIndex.from_frame(work[keys])).to_numpy()
    for column in ("reason", "basis", "limiter", "small_grid"):
        out[column] = blank_to_none(dominant(work[agrees], keys, column,
                                             groups=codes[agrees]))
    out["fused_modules"] = _first_fused(df, work, keys)
    out["aten_ops"] = (blank_to_none(dominant(work.assign(aten_ops=df["aten_ops"]), keys,
                                              "aten_ops", groups=codes))
                       if "aten_ops" in df else None)
    out = add_runs(out.reset_index(), df, KERNEL_KEYS)
    out = per_run(out, df, LABELS, ["launches", "duration_ns", "headroom_ns", "roof_time_ns"])
    out = out.drop(columns="runs")
    totals = out.groupby(list(LABELS))["duration_ns"].transform("sum")
    out["pct_of_total"] = 100.0 * out["duration_ns"] / totals
    out["pct_of_roof"] = 100.0 * out["roof_time_ns"] / out["duration_ns"]
    out["next_step"] = [next_step(*row) for row in zip(
        out["bound"], out["small_grid"], out["precision"], out["roofline_side"],
        out["pct_of_roof"], out["kernel"], out["basis"], out["limiter"], strict=True)]
    for column in KERNEL_KEYS:
        out[column] = blank_to_none(out[column])
    out = whole_counts(with_spread(out, keep_runs=keep_runs), ("launches",))
    return out.loc[:, [*HOTSPOT_COLUMNS, RUNS_COLUMN] if keep_runs else list(HOTSPOT_COLUMNS)]


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
        The top ``n`` rows, best first, with their bound, reason and ``next_step``.

    Raises:
        ValueError: an argument is out of range.
    """
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise ValueError(f"n must be a positive integer, got {n!r}")
    if order not in ("headroom", "time"):
        raise ValueError(f"order must be 'headroom' or 'time', got {order!r}")
    if level not in ("kernel", "module"):
        raise ValueError(f"level must be 'kernel' or 'module', got {level!r}")
    if level == "kernel":
        table = kernel_hotspots(df, keep_runs=True)
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
        table["next_step"] = [next_step(b, False, None) for b in table["bound"]]
        key = "exclusive_headroom_ns" if order == "headroom" else "exclusive_ns"
    time = "duration_ns" if level == "kernel" else "exclusive_ns"
    table = table.sort_values([key, time], ascending=False, na_position="last", kind="stable")
    return table.head(n).reset_index(drop=True)
