"""FLOPs from the calls table where the FLOP counters were not collected (the cheap tier).

The calls table counts each torch op's FLOPs analytically from its shapes (a GEMM ``2 M N
K``, attention, convolution), per module and direction. On the recorded training step of
``tests/data/hand_s128`` those counts are within 9% of Nsight Compute's counters for every
GEMM and attention module (tensor-core counters include the tiles' padding). A sweep that
collects durations and DRAM bytes only (``metric_set="fast"``) then still places every kernel
on the roofline: each (variant, shape, module, direction, op) group's analytic FLOPs go to
its longest kernel (the GEMM or attention kernel that does the work; its precision from the
call's dtype), the group's other kernels get 0 FLOPs in fp32 (elementwise work is placed by
its DRAM bytes). ``flops_basis`` says ``counters`` or ``calls``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from torch_nsight.analyze.frames import filled
from torch_nsight.vocabulary import JOIN_KEYS, tf32_enabled

#: Call dtype -> the precision a tensor-core kernel of that dtype runs at.
TENSOR_PRECISION = {"bfloat16": "tensor_bf16", "float16": "tensor_fp16"}
PRECISION_COLUMN = {"tensor_bf16": "tensor_bf16_flops", "tensor_fp16": "tensor_fp16_flops",
                    "tensor_tf32": "tensor_tf32_flops", "fp32": "flops_fp32"}


def _joined(frame: pd.DataFrame) -> pd.Series:
    """The join keys of each row as one string (missing keys empty)."""
    keys = frame.reindex(columns=list(JOIN_KEYS)).astype(object)
    keys = filled(keys).astype(str)
    return keys.agg("\x1f".join, axis=1) if len(keys) else pd.Series([], dtype=object)


def _precision(dtype: str, settings: Mapping[str, Any]) -> str:
    if dtype in TENSOR_PRECISION:
        return TENSOR_PRECISION[dtype]
    return "tensor_tf32" if tf32_enabled(settings, "matmul") else "fp32"


def _spread_over_iterations(out: pd.DataFrame, mine: pd.Series, site: pd.Series,
                            heavy: pd.Series, group: pd.DataFrame, run: pd.Series) -> None:
    """A report recorded by hand (no step label) profiles every iteration under one site, but
    the calls table holds one: where the heavy kernel launched k times per call (k > 1), each
    of its launches gets one call's FLOPs instead of the heaviest all of them (in place)."""
    names = out["kernel"].astype(str)
    heavy_name = pd.Series(names.loc[heavy.to_numpy()].to_numpy(), index=heavy.index)
    same = mine & (names == site.map(heavy_name))
    launches = same.groupby(site).sum().reindex(heavy.index).to_numpy()
    calls = group["calls"].to_numpy().astype("float64")
    unlabelled = (run.loc[heavy.to_numpy()] == "").to_numpy()
    spread = unlabelled & (calls > 0) & (launches > calls) & (launches % np.maximum(calls, 1) == 0)
    for position in np.flatnonzero(spread):
        rows = same & (site == heavy.index[position])
        precision = group["precision"].iloc[position]
        per_call = group["total"].iloc[position] / calls[position]
        out.loc[rows, ["flops", PRECISION_COLUMN[precision]]] = per_call
        out.loc[rows, "precision"] = precision


def fill_flops_from_calls(df: pd.DataFrame, calls: pd.DataFrame | None,
                          settings: Mapping[str, Any] | None = None) -> pd.DataFrame:
    """Give kernels without FLOP counters the calls table's analytic FLOPs.

    Args:
        df: a kernel table after :func:`~torch_nsight.analyze.roofline.add_flops`.
        calls: the attributed calls table (``flops``, ``count``, ``input_dtypes`` and the
            join keys), or None.
        settings: the profiled process's PyTorch settings (TF32 for fp32 GEMMs).

    Returns:
        A copy with ``flops``, the per-precision FLOP column, ``precision`` and
        ``flops_complete`` filled where the counters were missing, and ``flops_basis``.
    """
    out = df.copy()
    # numpy's stubs take no None for an array (it is one: an object array)
    basis = np.where(out["flops"].isna(), None, "counters")  # type: ignore[call-overload]
    out["flops_basis"] = basis
    missing = out["flops"].isna()
    if calls is None or calls.empty or not missing.any() or "flops" not in calls:
        return out
    work = calls.assign(total=calls["flops"].fillna(0.0) * calls.get("count", 1))
    work = work[work["total"] > 0]
    if work.empty:
        return out
    work = work.assign(key=_joined(work))
    dtype = work["input_dtypes"].map(lambda d: str(d[-1]) if isinstance(d, (tuple, list))
                                     and d else "")
    per_group = work.assign(dtype=dtype, calls=work.get("count", 1)).groupby(
        "key", sort=False).agg(total=("total", "sum"), dtype=("dtype", "first"),
                               calls=("calls", "sum"))
    per_group["precision"] = [_precision(d, settings or {}) for d in per_group["dtype"]]
    runs = out.reindex(columns=["source", "run"]).astype(object).fillna("").astype(str)
    key = _joined(out)
    site = key + "\x1e" + runs["source"] + "\x1e" + runs["run"]
    # a run whose group has counted rows already holds these FLOPs (a focused sweep's ncu
    # rows beside the timeline's stand-ins): never count them twice
    counted = set(site[~missing])
    mine = missing & key.isin(per_group.index) & ~site.isin(counted)
    if mine.any():
        out.loc[mine, ["flops", "flops_fp32"]] = 0.0
        out.loc[mine, "precision"] = "fp32"
        out.loc[mine, "flops_complete"] = True
        out.loc[mine, "flops_basis"] = "calls"
        # the group's longest kernel (the GEMM or attention kernel) does the counted work
        heavy = out["duration_ns"].fillna(0.0)[mine].groupby(site[mine], sort=False).idxmax()
        group = per_group.loc[key.loc[heavy.to_numpy()]]
        for precision, rows in group.groupby("precision", sort=False):
            index = heavy.to_numpy()[np.flatnonzero(group["precision"].to_numpy() == precision)]
            out.loc[index, "flops"] = rows["total"].to_numpy()
            out.loc[index, PRECISION_COLUMN[precision]] = rows["total"].to_numpy()
            out.loc[index, "precision"] = precision
        _spread_over_iterations(out, mine, site, heavy, group, runs["run"])
    # kernels of modules without FLOP-bearing calls: no floating-point work worth counting
    rest = missing & out["flops_basis"].isna() & out["dram_bytes"].notna()
    out.loc[rest, ["flops", "flops_fp32"]] = 0.0
    out.loc[rest, "precision"] = "fp32"
    out.loc[rest, "flops_complete"] = True
    out.loc[rest, "flops_basis"] = "calls"
    return out
