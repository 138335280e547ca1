"""Regressions: two profiles of one model lined up module by module (or kernel by kernel).

:func:`compare_profiles` is the pass behind ``torch-nsight compare``: each module's (or
kernel site's) time before and after, its bound and headroom on both sides, the change in
percent and a verdict. It is noise-aware: where a side holds several measured runs (distinct
``(source, run)`` pairs per label, e.g. a sweep with ``repeats > 1``), times are medians over
the runs, and a change whose ranges of runs overlap is ``within noise``, never a regression.
"""

from __future__ import annotations

import logging
import math
from typing import Literal

import numpy as np
import pandas as pd

from torch_nsight.analyze.attribute import PATH_SEP, UNATTRIBUTED
from torch_nsight.analyze.hotspots import kernel_hotspots
from torch_nsight.analyze.rollup import LABELS, blank_to_none, module_tree

logger = logging.getLogger(__name__)

CompareLevel = Literal["module", "kernel"]
Verdict = Literal["regressed", "improved", "unchanged", "within noise", "fused",
                  "only in baseline", "only in current"]
VERDICTS: tuple[str, ...] = ("regressed", "improved", "unchanged", "within noise", "fused",
                             "only in baseline", "only in current")
KEYS: dict[str, tuple[str, ...]] = {
    "module": (*LABELS, "direction", "path"),
    "kernel": (*LABELS, "direction", "path", "op", "kernel"),
}
REGRESS_COLUMNS: tuple[str, ...] = (
    "variant", "shape", "direction", "path", "module", "depth", "op", "kernel",
    "baseline_ns", "current_ns", "change_ns", "change_pct", "verdict",
    "baseline_bound", "current_bound", "baseline_headroom_ns", "current_headroom_ns",
    "baseline_runs", "current_runs", "baseline_min_ns", "baseline_max_ns",
    "current_min_ns", "current_max_ns",
)
_RUN_KEYS = (*LABELS, "source", "run")


def _blank(df: pd.DataFrame, columns: tuple[str, ...]) -> pd.DataFrame:
    """``columns`` as object dtype with missing values made ``""`` (a grouping key)."""
    df = df.copy()
    for column in columns:
        if column not in df:
            df[column] = ""
        df[column] = df[column].astype(object).where(df[column].notna(), "")
    return df


def _rows(df: pd.DataFrame, by: CompareLevel, depth: int | None) -> pd.DataFrame:
    """One side's modules or kernel sites: keys, ``time_ns`` per run, bound, headroom."""
    if by == "module":
        rows = module_tree(df, depth).rename(columns={"inclusive_ns": "time_ns"})
        rows["op"] = None
        rows["kernel"] = None
    else:
        if depth is not None:
            df = df.copy()
            paths = df["module_path"].fillna(UNATTRIBUTED).astype(str)
            df["module_path"] = paths.map(
                lambda p: p if p == UNATTRIBUTED else PATH_SEP.join(p.split(PATH_SEP)[:depth + 1]))
            df["module"] = df["module_path"].str.split(PATH_SEP).str[-1]
        rows = kernel_hotspots(df).rename(columns={"module_path": "path",
                                                   "duration_ns": "time_ns"})
        rows["depth"] = [None if p is None or p == UNATTRIBUTED else str(p).count(PATH_SEP)
                         for p in rows["path"]]
    return _blank(rows, KEYS[by])


def _per_run(df: pd.DataFrame, by: CompareLevel, depth: int | None) -> pd.DataFrame:
    """Median, min, max of each row's time over the runs of its label (0 in a run that
    lacks it), and the number of runs."""
    keys = list(KEYS[by])
    work = _blank(df, _RUN_KEYS)
    pieces = []
    for run_id, index in enumerate(work.groupby(list(_RUN_KEYS), sort=False).indices.values()):
        rows = _rows(df.iloc[index], by, depth)
        pieces.append(rows.loc[:, [*keys, "time_ns"]].assign(run_id=run_id))
    if not pieces:
        return pd.DataFrame(columns=[*keys, "median_ns", "min_ns", "max_ns", "runs"])
    long = pd.concat(pieces, ignore_index=True)
    runs = long.groupby(list(LABELS))["run_id"].nunique().rename("runs")
    wide = long.pivot_table(index=keys, columns="run_id", values="time_ns", aggfunc="sum")
    labelled = wide.reset_index().join(runs, on=list(LABELS))
    # A run of this label without the row took no time there: 0, not NaN.
    times = wide.to_numpy(dtype="float64", copy=True)
    label_runs = long.groupby(list(LABELS))["run_id"].unique()
    for row, label in enumerate(zip(*(labelled[c] for c in LABELS), strict=True)):
        for position, run_id in enumerate(wide.columns):
            if run_id in set(label_runs[label]) and np.isnan(times[row, position]):
                times[row, position] = 0.0
    labelled["median_ns"] = np.nanmedian(times, axis=1)
    labelled["min_ns"] = np.nanmin(times, axis=1)
    labelled["max_ns"] = np.nanmax(times, axis=1)
    return labelled.loc[:, [*keys, "median_ns", "min_ns", "max_ns", "runs"]]


def _side(df: pd.DataFrame, by: CompareLevel, depth: int | None) -> pd.DataFrame:
    """One side's rows in order: keys, module, depth, bound, headroom and run statistics."""
    keys = list(KEYS[by])
    summary = _rows(df, by, depth).loc[:, [*keys, "module", "depth", "bound", "headroom_ns"]]
    summary["order"] = np.arange(len(summary))
    return summary.merge(_per_run(df, by, depth), on=keys, how="left")


def _labels(df: pd.DataFrame) -> list[tuple[str, str]]:
    keys = _blank(df.reindex(columns=list(LABELS)), LABELS)
    return list(dict.fromkeys(map(tuple, keys.to_numpy())))


def _describe_label(label: tuple[str, str]) -> str:
    variant, shape = label
    text = f"shape {shape or '(unlabelled)'}"
    return f"{text}, variant {variant}" if variant else text


def _provenance_notes(baseline: pd.DataFrame, current: pd.DataFrame) -> list[str]:
    notes = []
    for column, what in (("gpu", "GPUs"), ("metric_set", "metric sets")):
        sides = [sorted({str(v) for v in df[column].dropna()}) if column in df else []
                 for df in (baseline, current)]
        if sides[0] and sides[1] and sides[0] != sides[1]:
            notes.append(f"the profiles come from different {what} (baseline "
                         f"{', '.join(sides[0])}; current {', '.join(sides[1])}): their "
                         "times are not comparable one to one")
    return notes


def _fused_modules(df: pd.DataFrame) -> set[tuple[str, str]]:
    """(direction, module) of every module some kernel fused across modules ran for."""
    if "fused_modules" not in df:
        return set()
    found = set()
    for direction, modules in zip(df["direction"].fillna(""), df["fused_modules"], strict=True):
        if modules is not None and not (isinstance(modules, float) and math.isnan(modules)):
            found.update((direction, m) for m in modules)
    return found


def _verdict(row: pd.Series, threshold: float) -> str:
    if pd.isna(row["current_ns"]):
        return "only in baseline"
    if pd.isna(row["baseline_ns"]):
        return "only in current"
    change = row["change_pct"]
    if change == 0 or abs(change) <= threshold:
        return "unchanged"
    noisy = max(row["baseline_runs"], row["current_runs"]) > 1
    if noisy and row["baseline_min_ns"] <= row["current_max_ns"] \
            and row["current_min_ns"] <= row["baseline_max_ns"]:
        return "within noise"
    return "regressed" if change > 0 else "improved"


def compare_profiles(baseline: pd.DataFrame, current: pd.DataFrame, *,
                     by: CompareLevel = "module", threshold: float = 5.0,
                     depth: int | None = None) -> pd.DataFrame:
    """Line up the modules (or kernel sites) of two profiles and call each change.

    Rows are matched by (variant, shape, direction, module path), and for ``by="kernel"``
    also by op and kernel name. When each side holds exactly one (variant, shape) label and
    they differ (two reports recorded by hand, labelled by file name), the current side is
    compared as if it had the baseline's label, and a note says so.

    Times are per run. A label measured in several runs (distinct ``(source, run)`` pairs)
    gives each row the median of its runs (0 in a run that lacks it) and the range
    ``[min, max]``. The verdict of a row present on both sides, with ``change_pct`` =
    100 (current - baseline) / baseline:

    - ``unchanged``: ``|change_pct| <= threshold``;
    - ``within noise``: beyond the threshold, but a side has several runs and the two
      ranges of runs overlap;
    - ``regressed`` (slower) or ``improved`` (faster) otherwise.

    Rows on one side only are kept, as ``only in baseline`` or ``only in current``; a
    module of the baseline whose work the current profile ran inside kernels fused across
    modules (its ``fused_modules``, as ``torch.compile`` does) is ``fused``: its time is
    in the enclosing module the fused kernel belongs to.

    Args:
        baseline: the attributed, classified kernel table before the change
            (:attr:`Profile.kernels <torch_nsight.Profile.kernels>`).
        current: the kernel table after the change.
        by: ``module`` (the module tree, inclusive times) or ``kernel`` (kernel sites:
            identical launches of one module, direction and op summed).
        threshold: the change in percent (>= 0) a row must exceed to be called.
        depth: deepest module level kept (root = 0); deeper modules fold into their
            ancestor. None keeps every level.

    Returns:
        One row per matched module or kernel site with :data:`REGRESS_COLUMNS`: the
        baseline's rows in call-tree order, then rows only in the current profile. Times in
        ns (medians), bounds and headroom per side, ``verdict`` one of :data:`VERDICTS`.
        ``attrs["notes"]`` holds what a reader must know (labels compared across, different
        GPUs or metric sets), one sentence each.

    Raises:
        TypeError: a table is not a DataFrame.
        ValueError: ``by``, ``threshold`` or ``depth`` is out of range.
        MissingMetricError: a table lacks the columns the roll-up needs.
    """
    for name, table in (("baseline", baseline), ("current", current)):
        if not isinstance(table, pd.DataFrame):
            raise TypeError(f"{name} must be a DataFrame, got {type(table).__name__}")
    if by not in KEYS:
        raise ValueError(f"by must be 'module' or 'kernel', got {by!r}")
    if isinstance(threshold, bool) or not isinstance(threshold, (int, float)) \
            or not math.isfinite(threshold) or threshold < 0:
        raise ValueError(f"threshold must be a finite percentage >= 0, got {threshold!r}")
    if depth is not None and (isinstance(depth, bool) or not isinstance(depth, int)
                              or depth < 0):
        raise ValueError(f"depth must be None or an integer >= 0, got {depth!r}")
    notes = _provenance_notes(baseline, current)
    base_labels, cur_labels = _labels(baseline), _labels(current)
    if len(base_labels) == 1 and len(cur_labels) == 1 and base_labels != cur_labels:
        current = current.copy()
        for column, value in zip(LABELS, base_labels[0], strict=True):
            current[column] = value or None
        notes.append(f"comparing {_describe_label(base_labels[0])} (baseline) with "
                     f"{_describe_label(cur_labels[0])} (current): each side holds one "
                     "label, so they are compared as one")
    keys = list(KEYS[by])
    before = _side(baseline, by, depth).rename(
        columns={"median_ns": "baseline_ns", "min_ns": "baseline_min_ns",
                 "max_ns": "baseline_max_ns", "runs": "baseline_runs",
                 "bound": "baseline_bound", "headroom_ns": "baseline_headroom_ns"})
    after = _side(current, by, depth).rename(
        columns={"median_ns": "current_ns", "min_ns": "current_min_ns",
                 "max_ns": "current_max_ns", "runs": "current_runs",
                 "bound": "current_bound", "headroom_ns": "current_headroom_ns",
                 "module": "module_after", "depth": "depth_after", "order": "order_after"})
    out = before.merge(after, on=keys, how="outer")
    only_current = out["order"].isna()
    out["module"] = out["module"].where(~only_current, out["module_after"])
    out["depth"] = out["depth"].where(~only_current, out["depth_after"])
    out["order"] = out["order"].where(~only_current, len(before) + out["order_after"])
    out = out.sort_values("order", kind="stable").reset_index(drop=True)
    out["change_ns"] = out["current_ns"] - out["baseline_ns"]
    with np.errstate(divide="ignore", invalid="ignore"):
        change = 100.0 * out["change_ns"] / out["baseline_ns"]
    out["change_pct"] = change.where(out["change_ns"] != 0, 0.0).where(out["change_ns"].notna())
    out["verdict"] = [_verdict(row, float(threshold)) for _, row in out.iterrows()] \
        if len(out) else pd.Series(dtype=object)
    fused = _fused_modules(current)
    if fused:
        gone = (out["verdict"] == "only in baseline") & np.array([
            (direction, module) in fused for direction, module in
            zip(out["direction"], out["module"], strict=True)], dtype=bool)
        out.loc[gone, "verdict"] = "fused"
    for column in keys:
        out[column] = blank_to_none(out[column])
    result = out.reindex(columns=list(REGRESS_COLUMNS))
    result.attrs["notes"] = notes
    logger.info("compared %d %s rows: %s", len(result), by,
                ", ".join(f"{v} {n}" for v, n in result["verdict"].value_counts().items()))
    return result
