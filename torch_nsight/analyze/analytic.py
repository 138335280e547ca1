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

from torch_nsight.analyze.calls import JOIN_KEYS

#: Call dtype -> the precision a tensor-core kernel of that dtype runs at.
TENSOR_PRECISION = {"bfloat16": "tensor_bf16", "float16": "tensor_fp16"}
PRECISION_COLUMN = {"tensor_bf16": "tensor_bf16_flops", "tensor_fp16": "tensor_fp16_flops",
                    "tensor_tf32": "tensor_tf32_flops", "fp32": "flops_fp32"}


def _keys(frame: pd.DataFrame) -> pd.DataFrame:
    keys = frame.reindex(columns=list(JOIN_KEYS)).astype(object)
    return keys.where(keys.notna(), "")


def _precision(dtype: str, settings: Mapping[str, Any]) -> str:
    if dtype in TENSOR_PRECISION:
        return TENSOR_PRECISION[dtype]
    tf32 = settings.get("cuda.matmul.allow_tf32") is True or settings.get(
        "float32_matmul_precision") in ("high", "medium")
    return "tensor_tf32" if tf32 else "fp32"


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
    out["flops_basis"] = np.where(out["flops"].notna(), "counters", None)
    missing = out["flops"].isna()
    if calls is None or calls.empty or not missing.any() or "flops" not in calls:
        return out
    work = calls.assign(total=calls["flops"].fillna(0.0) * calls.get("count", 1))
    work = work[work["total"] > 0]
    if work.empty:
        return out
    work = pd.concat([work, _keys(work).add_prefix("k_")], axis=1)
    dtype = work["input_dtypes"].map(lambda d: str(d[-1]) if isinstance(d, (tuple, list))
                                     and d else "")
    grouped = work.assign(dtype=dtype).groupby([f"k_{k}" for k in JOIN_KEYS], sort=False)
    per_group = grouped.agg(total=("total", "sum"), dtype=("dtype", "first"))
    keys = _keys(out)
    runs = out.reindex(columns=["source", "run"]).astype(object).fillna("")
    order = out["duration_ns"].fillna(0.0)
    for key, row in per_group.iterrows():
        group = (keys == list(key)).all(axis=1)
        mine = missing & group
        if not mine.any():
            continue
        # a run whose group has counted rows already holds these FLOPs (a focused sweep's
        # ncu rows beside the timeline's stand-ins): never count them twice
        counted = set(map(tuple, runs[group & ~missing].to_numpy()))
        precision = _precision(row["dtype"], settings or {})
        for run, index in out[mine].groupby([runs["source"], runs["run"]], sort=False).groups.items():
            if tuple(run) in counted:
                continue
            heavy = order.loc[index].idxmax()
            out.loc[index, ["flops", "flops_fp32"]] = 0.0
            out.loc[index, "precision"] = "fp32"
            out.loc[heavy, "flops"] = float(row["total"])
            out.loc[heavy, PRECISION_COLUMN[precision]] = float(row["total"])
            if precision != "fp32":
                out.loc[heavy, "flops_fp32"] = 0.0
            out.loc[heavy, "precision"] = precision
            out.loc[index, "flops_complete"] = True
            out.loc[index, "flops_basis"] = "calls"
    # kernels of modules without FLOP-bearing calls: no floating-point work worth counting
    rest = missing & out["flops_basis"].isna() & out["dram_bytes"].notna()
    out.loc[rest, ["flops", "flops_fp32"]] = 0.0
    out.loc[rest, "precision"] = "fp32"
    out.loc[rest, "flops_complete"] = True
    out.loc[rest, "flops_basis"] = "calls"
    return out
