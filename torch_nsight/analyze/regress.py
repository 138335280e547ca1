"""Regressions: two profiles of one model lined up module by module (or kernel by kernel).

:func:`compare_profiles` is the pass behind ``torch-nsight compare``: each module's (or
kernel site's) time before and after, its bound and headroom on both sides, the change in
percent and a verdict. It is noise-aware: where a side holds several measured runs (distinct
``(source, run)`` pairs per label, e.g. a sweep with ``runs > 1``), times are means over the
runs with their spread, and a change that Welch's t-test cannot tell from the runs' noise is
``within noise``, never a regression.
"""

from __future__ import annotations

import logging
import math
from typing import Literal

import numpy as np
import pandas as pd

from torch_nsight.analyze.frames import blank_to_none, filled
from torch_nsight.analyze.hotspots import kernel_hotspots
from torch_nsight.analyze.rollup import module_paths, module_tree
from torch_nsight.analyze.spread import RUNS_COLUMN, sum_runs, t_two_sided, with_spread
from torch_nsight.vocabulary import LABELS, UNATTRIBUTED, path_depth, path_leaf

logger = logging.getLogger(__name__)

CompareLevel = Literal["module", "kernel"]
Verdict = Literal["regressed", "improved", "unchanged", "within noise", "fused",
                  "only in baseline", "only in current", "replaced"]
#: ``replaced``: a baseline kernel of a module that ran other kernels in the current profile,
#: compared as a whole on the current kernels' rows (its time is their baseline).
VERDICTS: tuple[str, ...] = ("regressed", "improved", "unchanged", "within noise", "fused",
                             "only in baseline", "only in current", "replaced")
KEYS: dict[str, tuple[str, ...]] = {
    "module": (*LABELS, "direction", "module_path"),
    "kernel": (*LABELS, "direction", "module_path", "op", "kernel"),
}
REGRESS_COLUMNS: tuple[str, ...] = (
    "variant", "shape", "direction", "module_path", "module", "depth", "op", "kernel",
    "baseline_ns", "current_ns", "change_ns", "change_pct", "verdict",
    "baseline_bound", "current_bound", "baseline_headroom_ns", "current_headroom_ns",
    "baseline_runs", "current_runs", "baseline_std_ns", "baseline_ci95_ns",
    "current_std_ns", "current_ci95_ns", "p_value",
)
#: A change past the threshold is a regression only when Welch's test puts it outside the
#: noise at this level (p < ALPHA).
ALPHA = 0.05
_SIDE_COLUMNS = ("time_ns", "runs", "std_ns", "ci95_ns", "stable", "bound", "headroom_ns",
                 RUNS_COLUMN)


def _blank(df: pd.DataFrame, columns: tuple[str, ...]) -> pd.DataFrame:
    """``columns`` as object dtype with missing values made ``""`` (a grouping key)."""
    df = df.copy()
    for column in columns:
        if column not in df:
            df[column] = ""
        df[column] = filled(df[column])
    return df


def _rows(df: pd.DataFrame, by: CompareLevel, depth: int | None) -> pd.DataFrame:
    """One side's modules or kernel sites: keys, mean ``time_ns`` per run and the per-run
    times (``run_ns``), bound, headroom."""
    if by == "module":
        rows = module_tree(df, depth, keep_runs=True).rename(
            columns={"inclusive_ns": "time_ns"})
        rows["op"] = None
        rows["kernel"] = None
    else:
        if depth is not None:
            df = df.assign(module_path=module_paths(df, depth).to_numpy())
            df["module"] = df["module_path"].map(path_leaf)
        rows = kernel_hotspots(df, keep_runs=True).rename(columns={"duration_ns": "time_ns"})
        rows["depth"] = [None if p is None or p == UNATTRIBUTED else path_depth(str(p))
                         for p in rows["module_path"]]
    return _blank(rows, KEYS[by])


def _side(df: pd.DataFrame, by: CompareLevel, depth: int | None) -> pd.DataFrame:
    """One side's rows in order: keys, module, depth, bound, headroom, mean time per run
    and its spread (:mod:`torch_nsight.analyze.spread`)."""
    keys = list(KEYS[by])
    rows = _rows(df, by, depth)
    side = rows.loc[:, [*keys, "module", "depth", "bound", "headroom_ns", "time_ns",
                        RUNS_COLUMN]]
    side["order"] = np.arange(len(side))
    return with_spread(side, keep_runs=True)


def welch_p(before: np.ndarray, after: np.ndarray) -> float:
    """Two-sided p-value that two sets of per-run times share one mean.

    Welch's t-test where both sides hold several runs (it does not assume equal variances:
    two machines, days or clocks need not be equally noisy). Where only one side has
    several runs, the single time is tested against that side's prediction interval
    (``t = (x - mean) / (s * sqrt(1 + 1/n))``, ``n - 1`` degrees of freedom). NaN where
    neither side has two runs: the noise is unknown.
    """
    if len(before) < 2 and len(after) < 2:
        return math.nan
    if len(before) < 2 or len(after) < 2:
        single, runs = (before, after) if len(before) < 2 else (after, before)
        spread = float(np.std(runs, ddof=1)) * math.sqrt(1.0 + 1.0 / len(runs))
        difference = abs(float(single[0]) - float(np.mean(runs)))
        if spread == 0:
            return 0.0 if difference else 1.0
        return t_two_sided(difference / spread, len(runs) - 1)
    var_b, var_a = np.var(before, ddof=1) / len(before), np.var(after, ddof=1) / len(after)
    if var_b + var_a == 0:
        return 0.0 if np.mean(before) != np.mean(after) else 1.0
    t = (np.mean(after) - np.mean(before)) / math.sqrt(var_b + var_a)
    # Welch-Satterthwaite degrees of freedom
    dof = (var_b + var_a) ** 2 / (var_b ** 2 / (len(before) - 1) + var_a ** 2 / (len(after) - 1))
    return t_two_sided(float(t), float(dof))


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
    found: set[tuple[str, str]] = set()
    for direction, modules in zip(df["direction"].fillna(""), df["fused_modules"], strict=True):
        if modules is not None and not (isinstance(modules, float) and math.isnan(modules)):
            found.update((direction, m) for m in modules)
    return found


def _verdict(row: pd.Series, threshold: float, alpha: float) -> str:
    if pd.isna(row["current_ns"]):
        return "only in baseline"
    if pd.isna(row["baseline_ns"]):
        return "only in current"
    change = row["change_pct"]
    if pd.isna(change):  # time from none (or to none): beyond any percentage
        change = math.copysign(math.inf, row["current_ns"] - row["baseline_ns"])
    if change == 0 or abs(change) <= threshold:
        return "unchanged"
    if not pd.isna(row["p_value"]) and row["p_value"] >= alpha:
        return "within noise"
    return "regressed" if change > 0 else "improved"


def _call_swapped_kernels(out: pd.DataFrame, threshold: float, alpha: float,
                          notes: list[str]) -> None:
    """A module whose kernels differ on the two sides (cuBLAS picked another kernel for a
    new shape) is compared as a whole: its current-only rows take the change of the
    module's current-only time over its baseline-only time, called as any row is."""
    keys = [*LABELS, "direction", "module_path", "op"]
    alone = out["verdict"].isin(["only in baseline", "only in current"])
    for _, group in out[alone].groupby(keys, sort=False, dropna=False):
        before = group[group["verdict"] == "only in baseline"]
        after = group[group["verdict"] == "only in current"]
        if before.empty or after.empty:
            continue
        base_ns, cur_ns = before["baseline_ns"].sum(), after["current_ns"].sum()
        change = 100.0 * (cur_ns - base_ns) / base_ns if base_ns else math.nan
        base_runs = sum_runs(before[f"baseline_{RUNS_COLUMN}"])
        cur_runs = sum_runs(after[f"current_{RUNS_COLUMN}"])
        p = (welch_p(base_runs, cur_runs) if base_runs is not None and cur_runs is not None
             else math.nan)
        row = pd.Series({"baseline_ns": base_ns, "current_ns": cur_ns, "change_pct": change,
                         "p_value": p})
        verdict = _verdict(row, threshold, alpha)
        out.loc[after.index, ["baseline_ns", "change_ns", "change_pct", "p_value"]] = [
            base_ns, cur_ns - base_ns, change, p]
        out.loc[after.index, "verdict"] = verdict
        out.loc[before.index, "verdict"] = "replaced"  # counted in the rows above
        if verdict in ("regressed", "improved"):
            first = group.iloc[0]
            notes.append(f"{first['module_path']} ({first['direction']}) ran other kernels "
                         f"({', '.join(dict.fromkeys(after['kernel']))} instead of "
                         f"{', '.join(dict.fromkeys(before['kernel']))}): compared as a "
                         f"whole, {change:+.1f}%")


def _check_arguments(baseline: pd.DataFrame, current: pd.DataFrame, by: CompareLevel,
                     threshold: float, depth: int | None, alpha: float) -> None:
    """:func:`compare_profiles`'s arguments checked (the argument's name in the message).

    Raises:
        TypeError: a table is not a DataFrame.
        ValueError: ``by``, ``threshold``, ``depth`` or ``alpha`` is out of range.
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
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not 0 < alpha < 1:
        raise ValueError(f"alpha must be a probability between 0 and 1, got {alpha!r}")


def _relabel_single(baseline: pd.DataFrame, current: pd.DataFrame,
                    notes: list[str]) -> pd.DataFrame:
    """``current`` under the baseline's label where each side holds one label and they
    differ (two reports recorded by hand, labelled by file name), with a note; else as is."""
    base_labels, cur_labels = _labels(baseline), _labels(current)
    if len(base_labels) == 1 and len(cur_labels) == 1 and base_labels != cur_labels:
        current = current.copy()
        for column, value in zip(LABELS, base_labels[0], strict=True):
            current[column] = value or None
        notes.append(f"comparing {_describe_label(base_labels[0])} (baseline) with "
                     f"{_describe_label(cur_labels[0])} (current): each side holds one "
                     "label, so they are compared as one")
    return current


def as_compared(baseline: pd.DataFrame, current: pd.DataFrame) -> pd.DataFrame:
    """``current`` as :func:`compare_profiles` lines it up with ``baseline``: under the
    baseline's label where each side holds one label and they differ, else as is."""
    return _relabel_single(baseline, current, [])


def _matched_sides(baseline: pd.DataFrame, current: pd.DataFrame, by: CompareLevel,
                   depth: int | None) -> pd.DataFrame:
    """Both sides' rows joined on :data:`KEYS`, side columns prefixed ``baseline_`` and
    ``current_``: the baseline's rows in call-tree order, then those only in the current."""
    before = _side(baseline, by, depth).rename(
        columns={c: f"baseline_{c}" for c in _SIDE_COLUMNS}).rename(
        columns={"baseline_time_ns": "baseline_ns"})
    after = _side(current, by, depth).rename(
        columns={c: f"current_{c}" for c in _SIDE_COLUMNS}).rename(
        columns={"current_time_ns": "current_ns", "module": "module_after",
                 "depth": "depth_after", "order": "order_after"})
    out = before.merge(after, on=list(KEYS[by]), how="outer")
    only_current = out["order"].isna()
    out["module"] = out["module"].where(~only_current, out["module_after"])
    out["depth"] = out["depth"].where(~only_current, out["depth_after"])
    out["order"] = out["order"].where(~only_current, len(before) + out["order_after"])
    return out.sort_values("order", kind="stable").reset_index(drop=True)


def _add_changes(out: pd.DataFrame) -> None:
    """Add ``change_ns``, ``change_pct`` (0 where nothing changed, NaN where the baseline
    took no time) and ``p_value``
    (:func:`welch_p` of the per-run times, NaN where a side has none)."""
    out["change_ns"] = out["current_ns"] - out["baseline_ns"]
    # no percentage of no time: NaN (not inf) where the baseline took none
    change = 100.0 * out["change_ns"] / out["baseline_ns"].where(out["baseline_ns"] > 0)
    out["change_pct"] = change.where(out["change_ns"] != 0, 0.0).mask(out["change_ns"].isna())
    out["p_value"] = [welch_p(b, c) if isinstance(b, np.ndarray) and isinstance(c, np.ndarray)
                      else math.nan for b, c in zip(out[f"baseline_{RUNS_COLUMN}"],
                                                    out[f"current_{RUNS_COLUMN}"], strict=True)]


def _call_fused(out: pd.DataFrame, current: pd.DataFrame) -> None:
    """Call ``fused`` the baseline-only modules whose work ran in the current profile's
    kernels fused across modules (their ``fused_modules``)."""
    fused = _fused_modules(current)
    if fused:
        gone = (out["verdict"] == "only in baseline") & np.array([
            (direction, module) in fused for direction, module in
            zip(out["direction"], out["module"], strict=True)], dtype=bool)
        out.loc[gone, "verdict"] = "fused"


def compare_profiles(baseline: pd.DataFrame, current: pd.DataFrame, *,
                     by: CompareLevel = "module", threshold: float = 5.0,
                     depth: int | None = None, alpha: float = ALPHA) -> pd.DataFrame:
    """Line up the modules (or kernel sites) of two profiles and call each change.

    Rows are matched by (variant, shape, direction, module path), and for ``by="kernel"``
    also by op and kernel name. When each side holds exactly one (variant, shape) label and
    they differ (two reports recorded by hand, labelled by file name), the current side is
    compared as if it had the baseline's label, and a note says so.

    Times are per run. A label measured in several runs (distinct ``(source, run)`` pairs)
    gives each row the mean of its runs (0 in a run that lacks it), their standard
    deviation and 95% interval (:mod:`torch_nsight.analyze.spread`), and ``p_value``: how
    likely a difference this large is from noise alone (:func:`welch_p`: Welch's t-test, or
    the prediction interval of the side with runs where the other has one). The verdict of
    a row present on both sides, with ``change_pct`` = 100 (current - baseline) / baseline:

    - ``unchanged``: ``|change_pct| <= threshold``;
    - ``within noise``: beyond the threshold, but ``p_value >= alpha``;
    - ``regressed`` (slower) or ``improved`` (faster) otherwise: past the threshold and
      outside the noise, or past the threshold where neither side has several runs (the
      noise is unknown: ``attrs["noise_known"]`` is False).

    Rows on one side only are kept, as ``only in baseline`` or ``only in current``; a
    module of the baseline whose work the current profile ran inside kernels fused across
    modules (its ``fused_modules``, as ``torch.compile`` does) is ``fused``: its time is
    in the enclosing module the fused kernel belongs to. A module that ran other kernels is
    compared as a whole on its current-only rows; its baseline-only rows are ``replaced``.

    Args:
        baseline: the attributed, classified kernel table before the change
            (:attr:`Profile.kernels <torch_nsight.Profile.kernels>`).
        current: the kernel table after the change.
        by: ``module`` (the module tree, inclusive times) or ``kernel`` (kernel sites:
            identical launches of one module, direction and op summed).
        threshold: the change in percent (>= 0) a row must exceed to be called.
        depth: deepest module level kept (root = 0); deeper modules fold into their
            ancestor. None keeps every level.
        alpha: the p-value below which a change is outside the noise.

    Returns:
        One row per matched module or kernel site with :data:`REGRESS_COLUMNS`: the
        baseline's rows in call-tree order, then rows only in the current profile. Times in
        ns (means per run) with their spread, bounds and headroom per side, ``verdict`` one
        of :data:`VERDICTS`.
        ``attrs["notes"]`` holds what a reader must know (labels compared across, different
        GPUs or metric sets), one sentence each.

    Raises:
        TypeError: a table is not a DataFrame.
        ValueError: ``by``, ``threshold``, ``depth`` or ``alpha`` is out of range.
        MissingMetricError: a table lacks the columns the roll-up needs.
    """
    _check_arguments(baseline, current, by, threshold, depth, alpha)
    notes = _provenance_notes(baseline, current)
    current = _relabel_single(baseline, current, notes)
    out = _matched_sides(baseline, current, by, depth)
    _add_changes(out)
    out["verdict"] = [_verdict(row, float(threshold), alpha) for _, row in out.iterrows()] \
        if len(out) else pd.Series(dtype=object)
    if by == "kernel" and len(out):
        _call_swapped_kernels(out, float(threshold), alpha, notes)
    _call_fused(out, current)
    for column in KEYS[by]:
        out[column] = blank_to_none(out[column])
    result = out.reindex(columns=list(REGRESS_COLUMNS))
    result.attrs["notes"] = notes
    result.attrs["noise_known"] = bool(result["p_value"].notna().any())
    logger.info("compared %d %s rows: %s", len(result), by,
                ", ".join(f"{v} {n}" for v, n in result["verdict"].value_counts().items()))
    return result
