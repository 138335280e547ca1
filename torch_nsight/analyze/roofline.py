"""Roofline: FLOPs per precision, device peaks at the kernel's clocks, and each kernel's
distance to its roofline ceiling.

FLOPs are counted as Nsight Compute's own roofline charts count them: CUDA-core work is
``add + mul + 2 x fma`` thread instructions per precision; tensor-core counters already count
two operations per multiply-add. Peaks are the report's own per-cycle peaks times the clock
each kernel ran at; tensor-core peaks are the dense (``sparsity_off``) ones.
"""

from __future__ import annotations

import logging

import numpy as np
import pandas as pd

from torch_nsight.analyze.columns import needs
from torch_nsight.analyze.devices import known_gpu
from torch_nsight.analyze.frames import own
from torch_nsight.metrics import PRECISIONS

logger = logging.getLogger(__name__)

#: The most of its roofline ceiling a kernel can reach (percent).
MAX_PCT_OF_ROOF = 100.0

# CUDA-core precisions: FLOP column -> (add, mul, fma) instruction columns.
SASS_FLOPS: dict[str, tuple[str, str, str]] = {
    "flops_fp64": ("dadd_inst", "dmul_inst", "dfma_inst"),
    "flops_fp32": ("fadd_inst", "fmul_inst", "ffma_inst"),
    "flops_fp16": ("hadd_inst", "hmul_inst", "hfma_inst"),
}
SASS_COLUMNS = tuple(c for cols in SASS_FLOPS.values() for c in cols)
TENSOR_COLUMNS = tuple(col for name, (col, _, _) in PRECISIONS.items()
                       if name.startswith("tensor_"))
FLOP_COLUMNS = tuple(col for col, _, _ in PRECISIONS.values())
PEAK_COLUMNS = tuple(peak for _, peak, _ in PRECISIONS.values()) + ("peak_dram_bytes_per_cycle",)


def _column(df: pd.DataFrame, name: str) -> pd.Series:
    if name in df:
        return pd.to_numeric(df[name], errors="coerce").astype("float64")
    return pd.Series(np.nan, index=df.index, dtype="float64")


def add_flops(df: pd.DataFrame) -> pd.DataFrame:
    """Add ``flops_fp64/fp32/fp16``, ``flops``, ``precision`` and ``flops_complete``.

    A counter family (CUDA-core instructions, tensor-core paths) counts as collected for a
    kernel when any of its counters is present; a missing counter inside a collected family
    is a path this GPU does not have and counts 0. ``flops`` sums every collected precision
    (NaN when none was); ``flops_complete`` says whether both families were collected.
    ``precision`` is the precision with the most FLOPs, ``"none"`` for a kernel without
    floating-point work, NaN when nothing was collected.

    Args:
        df: a kernel table with the instruction and tensor counter columns.

    Returns:
        A copy with the FLOP columns added.
    """
    out = own(df)
    sass = pd.DataFrame({c: _column(out, c) for c in SASS_COLUMNS})
    tensor = pd.DataFrame({c: _column(out, c) for c in TENSOR_COLUMNS})
    has_sass = sass.notna().any(axis=1)
    has_tensor = tensor.notna().any(axis=1)
    for column, (add, mul, fma) in SASS_FLOPS.items():
        value = sass[add].fillna(0) + sass[mul].fillna(0) + 2 * sass[fma].fillna(0)
        out[column] = value.where(has_sass)
    for column in TENSOR_COLUMNS:
        out[column] = tensor[column].fillna(0).where(has_tensor)
    flops = out[list(FLOP_COLUMNS)]
    out["flops"] = flops.sum(axis=1, min_count=1)
    out["flops_complete"] = has_sass & has_tensor
    names = {col: name for name, (col, _, _) in PRECISIONS.items()}
    dominant = flops.fillna(-1.0).idxmax(axis=1).map(names)
    # Without every family, zero FLOPs may hide uncounted work: the precision is unknown.
    precision = [  # (total != total: NaN, a float of the float64 column's tolist())
        None if total != total else name if total > 0 else "none" if complete else None
        for total, name, complete in zip(out["flops"].tolist(), dominant.tolist(),
                                         out["flops_complete"].tolist(), strict=True)]
    out["precision"] = pd.Series(precision, index=out.index, dtype=object)
    return out


@needs("precision")
def add_peaks(df: pd.DataFrame) -> pd.DataFrame:
    """Add ``peak_flops_per_s`` (of the kernel's precision), ``peak_bytes_per_s`` and
    ``peak_basis`` (``report``, or ``table`` for a report without peaks of its own whose GPU
    is a known one: :mod:`~torch_nsight.analyze.devices`).

    Per-cycle peaks are device constants: a kernel missing one takes the value another kernel
    of the same report (``source``) recorded. Each is then multiplied by the kernel's own
    clock: ``peak_flops_per_s = peak per cycle x FLOP per unit x sm_clock_hz`` and
    ``peak_bytes_per_s = peak_dram_bytes_per_cycle x dram_clock_hz``.

    Args:
        df: a kernel table with ``precision`` (see :func:`add_flops`), the peak and clock
            columns.

    Returns:
        A copy with the two peak columns; NaN where the report lacks the peak or clock.
    """
    out = own(df)
    for column in PEAK_COLUMNS:
        values = _column(out, column)
        if "source" in out and values.isna().any() and values.notna().any():
            values = values.groupby(out["source"], dropna=False).transform("max")
        out[column] = values
    sm_clock = _column(out, "sm_clock_hz")
    peak = pd.Series(np.nan, index=out.index, dtype="float64")
    for name, (_, peak_column, factor) in PRECISIONS.items():
        chosen = out["precision"] == name
        peak = peak.mask(chosen, out[peak_column] * factor * sm_clock)
    out["peak_flops_per_s"] = peak
    out["peak_bytes_per_s"] = out["peak_dram_bytes_per_cycle"] * _column(out, "dram_clock_hz")
    out["peak_basis"] = pd.Series("report", index=out.index, dtype=object).where(
        out["peak_flops_per_s"].notna() | out["peak_bytes_per_s"].notna(), None)
    return _table_peaks(out)


def _table_peaks(out: pd.DataFrame) -> pd.DataFrame:
    """Peaks of a known GPU (:mod:`~torch_nsight.analyze.devices`) for rows whose report
    holds none (a duration-only recording), ``peak_basis`` ``table``."""
    bare = out["peak_flops_per_s"].isna() & out["peak_bytes_per_s"].isna()
    if "gpu" not in out or not bare.any():
        return out
    used = set()
    for name, rows in out[bare].groupby("gpu", sort=False):
        gpu = known_gpu(name)
        if gpu is None:
            continue
        flops = pd.Series([gpu.flops_per_s(p) if isinstance(p, str) else None
                           for p in rows["precision"]], index=rows.index, dtype="float64")
        out.loc[rows.index, "peak_flops_per_s"] = flops
        out.loc[rows.index, "peak_bytes_per_s"] = gpu.dram_bytes_per_s
        out.loc[rows.index, "peak_basis"] = "table"
        used.add(f"{name} ({gpu.boost_mhz:.0f} MHz boost)")
    if used:
        logger.info("the report holds no device peaks: took those of %s from the table of "
                    "known GPUs", ", ".join(sorted(used)))
    return out


@needs("duration_ns", "flops", "flops_complete", "peak_flops_per_s", "peak_bytes_per_s")
def add_roofline(df: pd.DataFrame) -> pd.DataFrame:
    """Place each kernel on its roofline.

    Adds ``intensity`` (FLOP per DRAM byte), ``achieved_flops_per_s``,
    ``achieved_bytes_per_s``, ``ridge_intensity`` (peak FLOP/s over peak bytes/s),
    ``roof_time_ns`` (the ceiling: ``max(flops / peak_flops, dram_bytes / peak_bytes)``),
    ``pct_of_roof`` (``100 x roof_time_ns / duration_ns``), ``headroom_ns`` (``duration_ns -
    roof_time_ns``, at least 0) and ``roofline_side`` (``compute`` when the FLOP term sets the
    ceiling, else ``memory``). A kernel without FLOPs has a compute term of 0 whatever its
    precision's peak. Where FLOPs are incomplete (see :func:`add_flops`) or a peak is
    missing, the ceiling columns are NaN. Where DRAM bytes were not collected (a
    duration-only report) the ceiling is the compute term alone, ``roof_basis`` says
    ``compute`` (else ``roofline``) and ``roofline_side`` stays unknown.

    Args:
        df: a kernel table after :func:`add_flops` and :func:`add_peaks`.

    Returns:
        A copy with the roofline columns.
    """
    out = own(df)
    duration_s = _column(out, "duration_ns") * 1e-9
    flops = out["flops"].where(out["flops_complete"].astype(bool))
    dram = _column(out, "dram_bytes")
    out["intensity"] = flops / dram.where(dram > 0)
    out["achieved_flops_per_s"] = out["flops"] / duration_s.where(duration_s > 0)
    out["achieved_bytes_per_s"] = dram / duration_s.where(duration_s > 0)
    out["ridge_intensity"] = out["peak_flops_per_s"] / out["peak_bytes_per_s"]
    compute_ns = (flops / out["peak_flops_per_s"] * 1e9).mask(flops == 0, 0.0)
    memory_ns = dram / out["peak_bytes_per_s"] * 1e9
    roof = np.fmax(compute_ns, memory_ns).mask(compute_ns.isna() | memory_ns.isna())
    # without DRAM bytes (a duration-only report), the compute ceiling alone: a kernel can
    # never beat it, though it may sit under a memory ceiling that is not known
    compute_only = roof.isna() & dram.isna() & (compute_ns > 0)
    roof = roof.mask(compute_only, compute_ns)
    out["roof_basis"] = pd.Series(np.where(compute_only, "compute", "roofline"),
                                  index=out.index, dtype=object).where(roof.notna(), None)
    out["roof_time_ns"] = roof
    duration = _column(out, "duration_ns")
    out["pct_of_roof"] = 100.0 * roof / duration.where(duration > 0)
    out["headroom_ns"] = (duration - roof).clip(lower=0.0)
    side = np.where(compute_ns >= memory_ns, "compute", "memory")
    known = roof.notna() & (roof > 0) & ~compute_only
    out["roofline_side"] = pd.Series(side, index=out.index, dtype=object).where(known, None)
    return _refuse_above_roof(out)


def _refuse_above_roof(out: pd.DataFrame) -> pd.DataFrame:
    """A kernel faster than its ceiling is physically impossible: its FLOPs or bytes were
    attributed to the wrong kernel (or a peak is wrong). Its roofline place is left unknown
    rather than shown, ``above_roof`` marks it, and the count is said once per table."""
    above = (out["pct_of_roof"] > MAX_PCT_OF_ROOF).fillna(False).astype(bool)
    out["above_roof"] = above
    if above.any():
        duration = _column(out, "duration_ns")
        share = 100.0 * duration[above].sum() / max(duration.sum(), 1.0)
        logger.warning("%d kernel(s) (%.1f%% of GPU time) came out above their roofline "
                       "ceiling, which no kernel can be (the worst at %.0f%%, %s): an "
                       "attribution error, so their roofline place is left unknown",
                       int(above.sum()), share, out.loc[above, "pct_of_roof"].max(),
                       out.loc[out.loc[above, "pct_of_roof"].idxmax(), "kernel"]
                       if "kernel" in out else "?")
        out.loc[above, ["roof_time_ns", "pct_of_roof", "headroom_ns"]] = np.nan
        out.loc[above, "roofline_side"] = None
    return out
