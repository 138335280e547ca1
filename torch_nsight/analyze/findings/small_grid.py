"""``small_grid`` and ``latency_bound``: latency-bound kernels holding :data:`SMALL_GRID_PCT`
of their label's time, with the cause the launch gives (the kernel table's ``limiter``,
:mod:`torch_nsight.analyze.limiter`: under one wave is ``small_grid``, anything else
``latency_bound``); gain: none estimated (``headroom``): no model says how much faster its
fix makes these kernels, so the finding carries their time above the roofline as the bound
no fix can beat (``gain_bound_ns``) and ranks after the findings whose gain is counted
(:func:`~torch_nsight.analyze.findings.run_checks.ranked`). Registered last: a kernel an
earlier check reported (``Context.claimed``) is not reported again here, and an optimizer's kernels are
:mod:`.optimizer_step`'s.

The fix is the one that fits the op and its cause (:func:`latency_fix`), never "a larger
batch" where the grid is small because of the op's own shape: a convolution in NCHW goes
channels-last, in NHWC lets cuDNN time its algorithms (``cudnn.benchmark``); batch norm and
pooling in NCHW go channels-last; a GEMM under one wave gets more rows per call (not one of
one block: a larger batch adds no blocks); attention tries another backend; a launch of a
few µs goes into a CUDA graph; the casts, bias
reductions and adds beside a GEMM or convolution fuse (torch.compile); gathers, scatters and
index-adds have no PyTorch-level fix (their grid follows the indices), which the finding
says.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from torch_nsight.analyze.findings.call_shapes import GEMM_OPS
from torch_nsight.analyze.findings.codes import Cause, FixCode
from torch_nsight.analyze.findings.prepare import per_run, roof_pct
from torch_nsight.analyze.findings.record import HEADROOM, NAN, Finding
from torch_nsight.analyze.findings.registry import Context, finding_check
from torch_nsight.analyze.findings.sites import Site, layout_of
from torch_nsight.analyze.limiter import LIMITER_INPUTS
from torch_nsight.vocabulary import JOIN_KEYS, LABELS, SITE_KEYS, UNATTRIBUTED, split_path

#: A kernel site holding at least this share (%) of its label's time.
SMALL_GRID_PCT = 5.0


def latency_fix(site: Site, cause: Cause | None, settings: Mapping[str, Any],
                attributed: bool, library: bool, compiled: bool = False) -> FixCode:
    """The fix for a latency-bound launch of this site and cause (the module docstring).

    Args:
        site: the site's codes (its module's kind, its layout).
        cause: what limits the launch.
        settings: the PyTorch settings recorded with the profile (``cudnn.benchmark``).
        attributed: whether the kernel ran inside a module range.
        library: whether the kernel is the site's GEMM or convolution (not the casts,
            bias reductions and adds beside it, which fuse).
        compiled: whether torch.compile generated the kernel (Inductor's): no fusion to
            advise, it fused already.
    """
    kind = site.kind
    if cause == "launch_overhead":
        return "cuda_graphs"
    if compiled and not library:
        return "none_known"
    if not attributed:
        return "none_known" if kind in ("indexing", "embedding") else "compile_function"
    if kind in ("conv", "linear", "matmul", "gemm") and not library:
        return "compile_module"  # the elementwise work beside the GEMM or convolution
    if kind == "conv":
        if site.layout == "nchw":
            return "channels_last"
        if settings.get("cudnn.benchmark") is not True:
            return "cudnn_benchmark"
        return "larger_batch" if cause == "small_grid" else "none_known"
    if kind in ("batch_norm", "group_norm", "pool") and site.layout == "nchw":
        return "channels_last"
    if kind in ("linear", "matmul", "gemm"):
        return "larger_batch" if cause == "small_grid" else "none_known"
    if kind == "attention":
        return "sdpa_backend"
    if kind in ("indexing", "embedding", "recurrent", "optimizer"):
        return "none_known"
    return "compile_module"


def kernel_site(site: Site, gemm: bool) -> Site:
    """The site as its kernels' fix reads it: a GEMM kernel in a module whose calls hold a
    convolution and GEMM ops (Mamba's mixer: a ``conv1d``, then its scan's ``matmul``s) is
    the GEMMs', not the convolution's (no ``cudnn.benchmark`` reaches a cuBLAS GEMM); a
    GEMM kernel at a site of convolutions alone is cuDNN's own (a 1x1 convolution)."""
    if gemm and site.kind == "conv" and any(op in GEMM_OPS for op in site.ops):
        return dataclasses.replace(site, kind="gemm")
    return site


def _launch(rows: pd.DataFrame) -> dict[str, Any]:
    """The launch figures of the longest of ``rows`` (what limits it, in numbers)."""
    largest = rows.loc[rows["duration_ns"].idxmax()]
    return {c: (None if isinstance(largest[c], float) and largest[c] != largest[c]
                else largest[c]) for c in LIMITER_INPUTS if c in rows}


@finding_check("small_grid")
def small_grid(context: Context) -> list[Finding]:
    """One finding per site and kernel name holding :data:`SMALL_GRID_PCT` of its label's
    time; then, of the rest, one per kind of module and fix whose sites hold that share
    together (a ResNet's 53 batch norms, none of which holds 5% alone), at the model's
    root."""
    work = context.work
    label_time = (work["duration_ns"] / work["runs"]).groupby(
        [work[c] for c in LABELS]).transform("sum")
    small = (work["waves"] < 1) | (work["limiter"] == "small_grid")
    caused = small | work["limiter"].ne("")
    candidates = work[(work["bound"] == "latency") & caused & ~work["is_optimizer"]
                      & ~work.index.isin(context.claimed)]
    found: list[Finding] = []
    rest: list[tuple[np.ndarray, Cause | None, FixCode, str | None]] = []
    # per group, from arrays: no frame is cut for a group that the share sends to the rest
    times = (candidates["duration_ns"] / candidates["runs"]).to_numpy(dtype=float)
    bounds = (candidates["headroom_ns"] / candidates["runs"]).to_numpy(dtype=float)
    totals = label_time[candidates.index].to_numpy(dtype=float)
    smalls = small[candidates.index].to_numpy(dtype=bool)
    library = (candidates["is_gemm"] | candidates["is_conv"]).to_numpy(dtype=bool)
    gemms = (candidates["is_gemm"] & ~candidates["is_conv"]).to_numpy(dtype=bool)
    compiled = candidates["is_compiled"].to_numpy(dtype=bool)
    values = {c: candidates[c].to_numpy(dtype=object)
              for c in dict.fromkeys((*JOIN_KEYS, "limiter"))}
    groups = candidates.groupby([*SITE_KEYS, "kernel"], sort=False).indices
    # in the order the groups first appear (pandas 2 hands ``indices`` back sorted by key)
    for positions in sorted(groups.values(), key=lambda p: int(p[0])):
        part = bounds[positions]
        gain = float(part.sum()) if not np.isnan(part).any() else math.nan
        if not gain > 0:
            continue  # without a roofline (no FLOPs or bytes) there is no headroom to judge
        first = positions[0]
        time = float(times[positions].sum())
        share = 100.0 * time / totals[first]
        under_one = bool(smalls[positions].any())
        limiter = values["limiter"][first]
        cause: Cause | None = "one_block" if limiter == "one_block" else (
            "small_grid" if under_one else limiter or None)
        site = kernel_site(context.site_at(tuple(values[k][first] for k in JOIN_KEYS)),
                           bool(gemms[positions].all()))
        attributed = values["module_path"][first] not in ("", UNATTRIBUTED)
        code = latency_fix(site, cause, context.settings, attributed,
                           bool(library[positions].any()), bool(compiled[positions].all()))
        if share < SMALL_GRID_PCT:
            if attributed and code != "none_known":
                rest.append((positions, cause, code, site.kind))
            continue
        rows = candidates.iloc[positions]
        found.append(Finding(
            "small_grid" if under_one else "latency_bound", rows, NAN, HEADROOM, "low", code,
            cause=cause, module_kind=site.kind, aten_ops=site.ops, layout=site.layout,
            fix_params={"setting": "cudnn.benchmark"} if code == "cudnn_benchmark" else {},
            facts={"kernel": rows.iloc[0]["kernel"], "waves": rows["waves"].min(),
                   "roof_pct": roof_pct(rows), "time_ns": time, "share_pct": share,
                   "launch": _launch(rows)}, bound_ns=gain))
    return found + _by_kind(candidates, times, rest, label_time)


def _by_kind(candidates: pd.DataFrame, times: np.ndarray,
             rest: list[tuple[np.ndarray, Cause | None, FixCode, str | None]],
             label_time: pd.Series) -> list[Finding]:
    """The latency-bound sites under the share alone (their positions in ``candidates``,
    whose per-run times are ``times``), gathered by label, kind of module and fix: one
    finding at the model's root where they hold :data:`SMALL_GRID_PCT` together."""
    labels = [candidates[c].to_numpy(dtype=object) for c in LABELS]
    gathered: dict[tuple[Any, ...], list[tuple[np.ndarray, Cause | None]]] = {}
    for positions, cause, code, kind in rest:
        key = (*(label[positions[0]] for label in labels), kind, code)
        gathered.setdefault(key, []).append((positions, cause))
    found: list[Finding] = []
    for key, parts in gathered.items():
        rows = candidates.iloc[np.concatenate([p for p, _ in parts])]
        time = per_run(rows)
        share = 100.0 * time / label_time[rows.index].iloc[0]
        modules = rows["module_path"].nunique()
        if share < SMALL_GRID_PCT or modules < 2:
            continue
        causes: dict[str, float] = {}
        for part, cause in parts:
            causes[str(cause)] = causes.get(str(cause), 0.0) + float(times[part].sum())
        top = max(causes, key=lambda c: causes[c])
        root = split_path(str(rows["module_path"].iat[0]))[0]
        kind, code = key[len(LABELS)], key[len(LABELS) + 1]
        layouts = set(rows["kernel"].map(lambda k: layout_of([k])).dropna())
        first = rows.iloc[:1].assign(module=root, module_path=root, direction="", op="")
        found.append(Finding(
            "small_grid" if top in ("small_grid", "one_block") else "latency_bound",
            pd.concat([first, rows.iloc[1:]]), NAN, HEADROOM, "low", code, cause=None if top == "None" else top,  # type: ignore[arg-type]
            module_kind=kind, layout=layouts.pop() if len(layouts) == 1 else None,
            fix_params={"setting": "cudnn.benchmark"} if code == "cudnn_benchmark" else {},
            facts={"kernel": rows.loc[rows["duration_ns"].idxmax(), "kernel"],
                   "sites": int(modules), "time_ns": time, "share_pct": share,
                   "roof_pct": roof_pct(rows),
                   "causes": {c: 100.0 * t / time for c, t in sorted(
                       causes.items(), key=lambda item: -item[1])}},
            bound_ns=per_run(rows, rows["headroom_ns"])))
    return found
