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

A compiled model has no calls table (a dispatch mode would run it eagerly); its kernel maps
carry instead each launch's FLOPs, counted by the same formulas on the FX nodes Inductor
fused (:mod:`torch_nsight.capture.compiled.flops`): :func:`fill_flops_from_inductor` shares
them among the kernels of the launch (``flops_basis`` ``inductor``).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from torch_nsight.analyze.frames import filled, own
from torch_nsight.analyze.ops import kernel_family
from torch_nsight.vocabulary import (
    INDUCTOR_DTYPE,
    INDUCTOR_FLOPS,
    INDUCTOR_LAUNCH,
    JOIN_KEYS,
    operand_dtype,
    tf32_enabled,
)

logger = logging.getLogger(__name__)

#: Call dtype -> the precision a tensor-core kernel of that dtype runs at.
TENSOR_PRECISION = {"bfloat16": "tensor_bf16", "float16": "tensor_fp16"}
#: Kernel families that do an op's FLOPs (:func:`~torch_nsight.analyze.ops.kernel_family`).
ARITHMETIC_FAMILIES = frozenset({"gemm", "conv", "attention"})
#: Kernels named like arithmetic ones that move or convert bytes (layout changes, a
#: precision conversion such as cuDNN attention's ``convert_dq_to_16bits``).
LAYOUT = re.compile(r"nchwToNhwc|nhwcToNchw|transpose|convert", re.IGNORECASE)
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


#: GEMM kernels whose names say they run float32 data on TF32 tensor cores: cuBLAS's
#: ``..._tf32f32_...`` and CUTLASS's ``tensorop_s1688``/``s16816`` (single precision through
#: the tensor cores' 16x8x8 and 16x8x16 TF32 instructions).
_TF32_KERNEL = re.compile(r"tf32|tensorop_s168", re.IGNORECASE)


def _tf32_where_it_ran(group: pd.DataFrame, heavy_kernels: pd.Series,
                       settings: Mapping[str, Any]) -> pd.DataFrame:
    """``group`` (a site's calls: ``precision`` per heavy kernel, in the same order) with
    float32 work put on the TF32 tensor roof where the settings do not say whether TF32 was
    on (a ``profile`` of a script that switched it itself) and the kernel that ran is a TF32
    one: under the FP32 roof such a GEMM would sit above its ceiling."""
    if tf32_enabled(settings, "matmul") is not None:
        return group
    ran = heavy_kernels.astype(str).map(lambda name: bool(_TF32_KERNEL.search(name)))
    precision = group["precision"].to_numpy().copy()
    precision[(precision == "fp32") & ran.to_numpy()] = "tensor_tf32"
    return group.assign(precision=precision)


#: Convolution kernels that run on CUDA cores whatever their data's precision: cuDNN's
#: direct ``implicit_convolve_sgemm`` / ``explicit_convolve_sgemm`` (16-bit data converted
#: to fp32 for FMAs: 0.44% tensor-pipe use on ViT-S/16's bf16 patch embedding in
#: ``bound_calibration/vit_full_sol``) and PyTorch's depthwise kernels.
DIRECT_CONVOLUTION = re.compile(r"(?:implicit|explicit)_convolve(?:Nd)?_sgemm",
                                re.IGNORECASE)
CUDA_CORE_CONVOLUTION = re.compile(rf"{DIRECT_CONVOLUTION.pattern}|conv_depthwise[23]d",
                                   re.IGNORECASE)


def _cuda_cores_where_it_ran(group: pd.DataFrame, heavy_kernels: pd.Series) -> pd.DataFrame:
    """``group`` with 16-bit work put on the fp32 CUDA-core roof where the kernel that ran
    it is a CUDA-core convolution (:data:`CUDA_CORE_CONVOLUTION`): the call's dtype says
    bf16, but no tensor core did the work."""
    ran = heavy_kernels.astype(str).map(lambda name: bool(CUDA_CORE_CONVOLUTION.search(name)))
    precision = group["precision"].to_numpy().copy()
    precision[np.isin(precision, list(TENSOR_PRECISION.values())) & ran.to_numpy()] = "fp32"
    return group.assign(precision=precision)


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
        at_site = mine & (site == heavy.index[position])
        rows = same & at_site
        out.loc[at_site & ~rows, ["flops", "flops_fp32"]] = 0.0  # the heavy kernel's alone
        out.loc[at_site & ~rows, "precision"] = "fp32"
        precision = group["precision"].iloc[position]
        per_call = group["total"].iloc[position] / calls[position]
        out.loc[rows, ["flops", PRECISION_COLUMN[precision]]] = per_call
        out.loc[rows, "precision"] = precision


def is_arithmetic(kernel: object) -> bool:
    """Whether a kernel does an op's counted arithmetic (a GEMM, convolution or attention
    kernel by its name), rather than copies, layout changes or reductions around it."""
    family = kernel_family(kernel)
    return family in ARITHMETIC_FAMILIES and not (
        isinstance(kernel, str) and LAYOUT.search(kernel) is not None)


def _shares(duration: pd.Series, arithmetic: pd.Series, site: pd.Series,
            heavy: pd.Series) -> pd.Series:
    """Each receiving row's share of its site's FLOPs: a site's arithmetic kernels split them
    in proportion to their time (a convolution's backward runs the data and the weight
    gradient as two kernels, a Linear's backward two GEMMs); a site without one gives them
    to its longest kernel (``heavy``, indexed by site). Indexed by row."""
    sites_with = set(site[arithmetic])
    lone = pd.Series(1.0, index=pd.Index(
        [row for s, row in heavy.items() if s not in sites_with]))
    time = duration[arithmetic]
    split = time / time.groupby(site[arithmetic]).transform("sum")
    # a site whose arithmetic kernels took no measured time: equal shares
    equal = 1.0 / arithmetic[arithmetic].groupby(site[arithmetic]).transform("size")
    split = split.where(split.notna(), equal)
    return pd.concat([split, lone])


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
    out = own(df)
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
    dtype = work["input_dtypes"].map(operand_dtype)
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
        # the kernels that do arithmetic (GEMM, convolution, attention) do the counted work;
        # where a group has none, its longest kernel
        duration = out["duration_ns"].fillna(0.0)
        arithmetic = mine & out["kernel"].map(is_arithmetic).astype(bool)
        has_arithmetic = arithmetic.groupby(site).transform("any")
        weight = duration.where(arithmetic | ~has_arithmetic, -1.0)[mine]
        heavy = weight.groupby(site[mine], sort=False).idxmax()
        heavy_kernels = out.loc[heavy.to_numpy(), "kernel"]
        group = _cuda_cores_where_it_ran(_tf32_where_it_ran(
            per_group.loc[key.loc[heavy.to_numpy()]], heavy_kernels, settings or {}),
            heavy_kernels)
        share = _shares(duration, arithmetic, site, heavy)
        for precision, rows in group.groupby("precision", sort=False):
            sites = heavy.index[np.flatnonzero(group["precision"].to_numpy() == precision)]
            total = pd.Series(rows["total"].to_numpy(), index=sites)
            takes = share.index[site.loc[share.index].isin(sites)]
            values = share.loc[takes] * site.loc[takes].map(total)
            out.loc[takes, "flops"] = values
            out.loc[takes, PRECISION_COLUMN[precision]] = values
            out.loc[takes, "precision"] = precision
        _spread_over_iterations(out, mine, site, heavy, group, runs["run"])
    # kernels of modules without FLOP-bearing calls: no floating-point work worth counting
    rest = missing & out["flops_basis"].isna() & out["dram_bytes"].notna()
    out.loc[rest, ["flops", "flops_fp32"]] = 0.0
    out.loc[rest, "precision"] = "fp32"
    out.loc[rest, "flops_complete"] = True
    out.loc[rest, "flops_basis"] = "calls"
    return out


def fill_flops_from_inductor(df: pd.DataFrame,
                             settings: Mapping[str, Any] | None = None) -> pd.DataFrame:
    """Give compiled kernels without FLOP counters the FLOPs their kernel map carries.

    Each launch of a compiled graph carries the FLOPs of the FX nodes it does
    (``inductor_flops``, a GEMM's on its extern GEMM launch, 0 on elementwise and reduction
    kernels) and their operand dtype. A launch that ran several kernels (an extern GEMM
    with its split-K reduction, cuDNN attention with its conversions) shares them as the
    calls table's sites do: its arithmetic kernels in proportion to their time, else its
    longest kernel; the others get 0 FLOPs in fp32 (placed by their DRAM bytes)::

        kernel              inductor_launch  inductor_flops  ->  flops   precision    basis
        nvjet_sm90_tst_...  g1/0/4           2.4e11              2.4e11  tensor_bf16  inductor
        splitKreduce_kernel g1/0/4           2.4e11              0       fp32         inductor
        triton_poi_fused_5  g1/0/5           0                   0       fp32         inductor

    Args:
        df: a kernel table after :func:`fill_flops_from_calls` (``flops_basis``).
        settings: the profiled process's PyTorch settings (TF32 for fp32 GEMMs).

    Returns:
        A copy with ``flops``, the per-precision FLOP column, ``precision``,
        ``flops_complete`` and ``flops_basis`` filled for those kernels; ``df`` itself when
        no kernel carries a launch's FLOPs.
    """
    if INDUCTOR_FLOPS not in df or "flops" not in df:
        return df
    carried = pd.to_numeric(df[INDUCTOR_FLOPS], errors="coerce")
    mine = df["flops"].isna() & carried.notna() & df[INDUCTOR_LAUNCH].notna()
    if not mine.any():
        return df
    out = own(df)
    out.loc[mine, ["flops", "flops_fp32"]] = 0.0
    out.loc[mine, "precision"] = "fp32"
    out.loc[mine, "flops_complete"] = True
    out.loc[mine, "flops_basis"] = "inductor"
    # one launch of one graph call, per report (the id says the graph call, not the report)
    origin = (out.loc[mine, "source"].astype(str) + "\x1f" if "source" in out
              else pd.Series("", index=out.index[mine]))
    site = origin + out.loc[mine, INDUCTOR_LAUNCH].astype(str)
    doing = carried[mine] > 0
    if not doing.any():
        return out
    site = site[doing]
    duration = out.loc[site.index, "duration_ns"].fillna(0.0)
    arithmetic = out.loc[site.index, "kernel"].map(is_arithmetic).astype(bool)
    has_arithmetic = arithmetic.groupby(site).transform("any").astype(bool)
    # a launch matched to no GEMM, convolution or attention kernel (an extern GEMM's
    # split-K reduce taken for the next launch) keeps 0: its FLOPs are left unplaced
    # rather than put on a kernel that does not do them
    if not has_arithmetic.all():
        logger.debug("%d compiled launch(es) with FLOPs matched no arithmetic kernel",
                     site[~has_arithmetic].nunique())
    site, duration, arithmetic = (site[has_arithmetic], duration[has_arithmetic],
                                  arithmetic[has_arithmetic])
    if site.empty:
        return out
    heavy = duration.where(arithmetic, -1.0).groupby(site, sort=False).idxmax()
    share = _shares(duration, arithmetic, site, heavy)
    values = share * carried.loc[share.index]
    precision = pd.Series([_precision(str(d), settings or {})
                           for d in out.loc[share.index, INDUCTOR_DTYPE]], index=share.index)
    # 16-bit data that a CUDA-core convolution ran (cuDNN's direct kernels): the fp32 roof
    on_cuda_cores = out.loc[share.index, "kernel"].astype(str).map(
        lambda name: bool(CUDA_CORE_CONVOLUTION.search(name))).astype(bool)
    precision = precision.mask(on_cuda_cores & precision.isin(list(TENSOR_PRECISION.values())),
                               "fp32")
    for name, rows in precision.groupby(precision, sort=False):
        out.loc[rows.index, "flops"] = values.loc[rows.index]
        out.loc[rows.index, "flops_fp32"] = 0.0
        out.loc[rows.index, PRECISION_COLUMN[str(name)]] = values.loc[rows.index]
        out.loc[rows.index, "precision"] = name
    return out
