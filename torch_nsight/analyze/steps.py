"""Step metrics of a timeline: the numbers per step, their medians per shape, launches per
module. Numbers only: :mod:`~torch_nsight.analyze.verdicts` judges them and
:mod:`torch_nsight.render.timeline_words` words them.

A timeline source (a ``torch.profiler`` trace) carries two tables: ``kernels``, one row per
GPU activity (kernel, copy, memset), and ``timeline``, one ``step`` row per measured
iteration and one ``gap`` row per interval of at least 1 µs inside a step where the GPU ran
nothing. An activity belongs to the step with its ``(source, variant, shape, run)``.

Step numbers are computed per step, then reported as the median over the shape's steps;
module numbers are sums divided by the shape's number of steps (``docs/timeline.md``).
"""

from __future__ import annotations

import logging

import numpy as np
import pandas as pd

from torch_nsight.analyze.columns import check_columns, needs
from torch_nsight.analyze.frames import blank_to_none, each_value, filled, keyed, runs_per_group
from torch_nsight.analyze.rollup import module_paths
from torch_nsight.analyze.spread import spread
from torch_nsight.vocabulary import LABELS, path_leaf

logger = logging.getLogger(__name__)

#: A kernel shorter than this (ns) is small: eager PyTorch takes longer to launch it.
SMALL_KERNEL_NS = 10_000.0
#: The most bytes a copy can move per ns (GB/s), above every GPU's memory bandwidth (H200:
#: 4.8 TB/s; B200: 8 TB/s): a trace's copy claiming more has a byte count not to believe.
MAX_COPY_BYTES_PER_NS = 20_000.0
#: A gap is a data wait when its ``cpu`` contains one of these (case-insensitive).
DATA_LOADING_PATTERNS = ("dataloader", "__next__", "collate", "pin_memory")

MODULE_LAUNCH_COLUMNS = ("variant", "shape", "module_path", "module", "steps", "launches",
                         "kernels", "gpu_ns", "pct_of_gpu", "median_kernel_ns",
                         "small_kernel_pct")
KERNEL_NEEDS = ("source", "variant", "shape", "run", "kind", "duration_ns", "bytes", "pinned",
                "module", "module_path")
TIMELINE_NEEDS = ("source", "variant", "shape", "run", "kind", "start_ns", "end_ns",
                  "busy_ns", "launches", "sync_ns", "bare_ns", "ranged_ns", "cpu",
                  "prev_module", "next_module")
#: What makes a step one step: its source, labels and run.
STEP_KEYS = ["source", *LABELS, "run"]
#: Per-step sums of the activity table.
_SUMS = ("kernels", "kernel_ns", "small", "small_ns", "copies", "copy_ns", "copy_bytes",
         "pageable", "pageable_ns", "untrusted")
#: Per-step numbers whose median over its steps a shape reports.
MEDIANS = ("wall_ns", "busy_ns", "idle_ns", "other_idle_ns", "busy_pct", "idle_pct",
           "kernels", "launches", "launches_per_ms", "small_kernel_pct",
           "small_kernel_time_pct", "copies", "copy_bytes", "copy_gb_per_s", "pageable",
           "copy_ns", "copy_pct", "copy_busy_pct", "data_ns", "data_wait_pct", "sync_pct")
#: Gaps of the median step the summary lists.
LARGEST_GAPS = 3


def _keyed(df: pd.DataFrame) -> pd.DataFrame:
    """A copy with the step keys first, as objects, missing ones ``""``."""
    return keyed(df, STEP_KEYS, df.columns)


def _positive(values: pd.Series) -> pd.Series:
    """``values`` as floats with zero and negative ones NaN (a safe divisor)."""
    values = values.astype("float64")
    return values.where(values > 0)


def _is_false(value: object) -> bool:
    """Whether ``pinned`` says pageable (False); None (not a host copy) is not."""
    return isinstance(value, bool | np.bool_) and not value


def _is_data_loading(cpu: object) -> bool:
    return isinstance(cpu, str) and any(p in cpu.lower() for p in DATA_LOADING_PATTERNS)


def _activity(kernels: pd.DataFrame, steps: pd.DataFrame) -> pd.DataFrame:
    """The GPU activities inside a measured step, each with its part of the step's sums::

        kind    duration_ns pinned        kind    … kernels small copies pageable copy_ns …
        kernel  4000        None     ->   kernel  … 1       1     0      0        0       …
        memcpy  20000       False         memcpy  … 0       0     1      1        20000   …

    (also ``kernel_ns``, ``small_ns``, ``pageable_ns`` and ``copy_bytes``).
    """
    activity = _keyed(kernels).merge(steps[STEP_KEYS].drop_duplicates(), on=STEP_KEYS,
                                     how="inner")
    if len(activity) < len(kernels):
        logger.debug("%d GPU activities outside any measured step left out",
                     len(kernels) - len(activity))
    kind, duration = activity["kind"], activity["duration_ns"].astype("float64")
    is_kernel, is_copy = kind == "kernel", kind == "memcpy"
    small = is_kernel & (duration < SMALL_KERNEL_NS)
    pageable = is_copy & activity["pinned"].map(_is_false).astype(bool)
    parts = {"kernels": is_kernel, "small": small, "copies": is_copy, "pageable": pageable}
    for name, mask in parts.items():
        activity[name] = mask.astype("float64")
    for name, mask in {"kernel_ns": is_kernel, "small_ns": small, "copy_ns": is_copy,
                       "pageable_ns": pageable}.items():
        activity[name] = duration.where(mask, 0.0)
    copied = activity["bytes"].astype("float64")
    implausible = is_copy & (duration > 0) & (copied > MAX_COPY_BYTES_PER_NS * duration)
    if implausible.any():  # a byte count no memory could move in the copy's time
        logger.warning("%d copies claim more bytes than any GPU's memory moves in their "
                       "duration (%.0f GB/s at most): their byte counts are left out",
                       int(implausible.sum()), MAX_COPY_BYTES_PER_NS)
    activity["copy_bytes"] = copied.where(is_copy & ~implausible, 0.0)
    activity["untrusted"] = implausible.astype("float64")
    return activity


#: What :func:`step_table` returns: the steps, their activities, their gaps.
StepTables = tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]


def step_table(kernels: pd.DataFrame, timeline: pd.DataFrame | None, caller: str,
               ) -> StepTables:
    """The numbers of every measured step; also its activities and its gaps.

    One row per ``step`` row of the timeline, with the sums of its activities, its data
    waits and the shares they make of the step (keys as objects, missing ones ``""``)::

        timeline                                  steps
        run kind start_ns end_ns busy_ns cpu         run wall_ns busy_pct kernels data_ns …
        0   step 0        1.0e6  4.0e5   None   ->   0   1.0e6   40.0     12      3.0e5   …
        0   gap  1.0e5    4.0e5  NaN     __next__

    The activities (:func:`_activity`) and the gaps, with ``gap_ns`` and ``data`` (a wait
    on data loading: its ``cpu`` matches :data:`DATA_LOADING_PATTERNS`), come along.

    Raises:
        MissingMetricError: the timeline lacks a column; ``caller`` names the pass.
    """
    timeline = pd.DataFrame() if timeline is None else timeline
    check_columns(timeline, TIMELINE_NEEDS, caller)
    steps = _keyed(timeline[timeline["kind"] == "step"]).reset_index(drop=True)
    activity = _activity(kernels, steps)
    sums = activity.groupby(STEP_KEYS, sort=False)[list(_SUMS)].sum().reset_index()
    steps = steps.merge(sums, on=STEP_KEYS, how="left")
    gaps = _keyed(timeline[timeline["kind"] == "gap"]).reset_index(drop=True)
    gaps["gap_ns"] = gaps["end_ns"].astype("float64") - gaps["start_ns"].astype("float64")
    gaps["data"] = each_value(gaps["cpu"], _is_data_loading)
    data = (gaps[gaps["data"]].groupby(STEP_KEYS, sort=False)["gap_ns"].sum()
            .rename("data_ns").reset_index())
    steps = steps.merge(data, on=STEP_KEYS, how="left")
    steps[[*_SUMS, "data_ns"]] = steps[[*_SUMS, "data_ns"]].astype("float64").fillna(0.0)
    wall = steps["end_ns"].astype("float64") - steps["start_ns"].astype("float64")
    busy = steps["busy_ns"].astype("float64")
    steps["wall_ns"], steps["busy_ns"] = wall, busy
    steps["launches"] = steps["launches"].astype("float64")
    steps["idle_ns"] = wall - busy
    steps["other_idle_ns"] = (steps["idle_ns"] - steps["data_ns"]).clip(lower=0.0)
    per_wall = 100.0 / _positive(wall)
    steps["busy_pct"] = busy * per_wall
    steps["idle_pct"] = 100.0 - steps["busy_pct"]
    steps["launches_per_ms"] = steps["launches"] * 1e6 / _positive(wall)
    steps["small_kernel_pct"] = 100.0 * steps["small"] / _positive(steps["kernels"])
    steps["small_kernel_time_pct"] = 100.0 * steps["small_ns"] / _positive(steps["kernel_ns"])
    # the time some copy ran: copies on several streams overlap, so their durations' sum
    # may exceed the step (a timeline read before the union was kept: capped at busy)
    union = (steps["copy_busy_ns"].astype("float64") if "copy_busy_ns" in steps
             else pd.Series(np.nan, index=steps.index))
    steps["copy_ns"] = union.where(union.notna(), steps["copy_ns"].clip(upper=busy))
    steps["copy_gb_per_s"] = steps["copy_bytes"] / _positive(steps["copy_ns"])  # B/ns = GB/s
    unknown = steps.pop("untrusted") > 0  # a step with a byte count not believed: unknown
    steps.loc[unknown, ["copy_bytes", "copy_gb_per_s"]] = np.nan
    steps["copy_pct"] = steps["copy_ns"] * per_wall
    steps["copy_busy_pct"] = 100.0 * steps["copy_ns"] / _positive(busy)
    steps["data_wait_pct"] = steps["data_ns"] * per_wall
    steps["sync_pct"] = steps["sync_ns"].astype("float64") * per_wall
    return steps, activity, gaps


def shape_table(steps: pd.DataFrame) -> pd.DataFrame:
    """Per (variant, shape), the medians of its steps' numbers and what the profiler and the
    module ranges added to them::

        steps                                  shapes
        shape run wall_ns bare_ns ranged_ns    shape steps wall_ns … distortion_pct profiler_pct
        s     0   1.0e6   8.0e5   8.4e5    ->  s     2     1.1e6   … 5.0            31.0
        s     1   1.2e6   8.0e5   8.4e5

    with the medians of :data:`MEDIANS`, ``bare_busy_pct``, ``bare_wall_ns``,
    ``judged_busy_pct``, ``gain_idle_ns``, ``wall_mean_ns``, ``wall_std_ns``,
    ``wall_ci95_ns`` and ``stable``.

    ``judged_busy_pct`` is the GPU's busy time over the step timed without profiler and
    ranges (``bare_ns``); ``gain_idle_ns`` the idle time outside data loading such a step
    would have (the profiled one's where it was not timed). The wall time's noise is
    :func:`~torch_nsight.analyze.spread.spread`'s.
    """
    labels = steps.groupby(list(LABELS), sort=False)
    out = labels[list(MEDIANS)].median()
    out["steps"] = labels.size()
    bare, ranged = labels["bare_ns"].median(), labels["ranged_ns"].median()
    out["bare_spread_pct"] = (labels["bare_spread_pct"].median() if "bare_spread_pct" in steps
                              else np.nan)
    out["distortion_pct"] = 100.0 * (ranged - bare) / _positive(bare)
    out["profiler_pct"] = 100.0 * (out["wall_ns"] - ranged) / _positive(ranged)
    out["bare_busy_pct"] = 100.0 * out["busy_ns"] / _positive(bare)
    out["bare_wall_ns"] = bare
    out["judged_busy_pct"] = out["bare_busy_pct"].clip(upper=100.0)
    # idle time a step without profiler or ranges would have, where its time was measured
    bare_idle = (bare - out["busy_ns"] - out["data_ns"]).clip(lower=0.0)
    out["gain_idle_ns"] = bare_idle.mask(bare.isna(), out["other_idle_ns"]).clip(
        upper=out["other_idle_ns"])
    # the step time's noise over the steps (torch_nsight.analyze.spread)
    # (arrays built by hand: newer pandas refuses an aggregation that returns an array)
    walls = pd.Series([group.to_numpy(dtype="float64") for _, group in labels["wall_ns"]],
                      index=out.index, dtype=object)
    noise = spread(walls)
    out["wall_mean_ns"] = [float(np.mean(w)) for w in walls]
    out["wall_std_ns"], out["wall_ci95_ns"] = noise["std_ns"], noise["ci95_ns"]
    out["stable"] = noise["stable"]
    return out.reset_index()


def median_step_gaps(steps: pd.DataFrame, gaps: pd.DataFrame,
                     count: int = LARGEST_GAPS) -> pd.DataFrame:
    """Per label, the ``count`` largest gaps of its median step (wall nearest the median),
    largest first::

        steps             gaps                                  out
        run wall_ns       run gap_ns next_module cpu            run gap_ns next_module cpu
        0   1.0e6    +    1   3e5    h.0.attn    aten::item  -> 1   3e5    h.0.attn    aten::item
        1   1.1e6         1   1e5    None        None           1   1e5    None        None
        2   1.3e6         2   9e5    h.1.mlp     aten::item
    """
    distance = (steps["wall_ns"] - steps.groupby(list(LABELS), sort=False)["wall_ns"]
                .transform("median")).abs()
    median_steps = steps.assign(_d=distance).sort_values("_d", kind="stable")
    median_steps = median_steps.drop_duplicates(subset=list(LABELS))
    mine = gaps.merge(median_steps[STEP_KEYS], on=STEP_KEYS, how="inner")
    top = mine.sort_values("gap_ns", ascending=False, kind="stable")
    return top.groupby(list(LABELS), sort=False).head(count).reset_index(drop=True)


def gaps_with_modules(activity: pd.DataFrame, gaps: pd.DataFrame) -> pd.DataFrame:
    """The gaps with ``top``: the top-level module of the module the GPU ran next::

        next_module  gap_ns           next_module  gap_ns  top
        attn         300000    ->     attn         300000  Net/blocks
        None         100000           ""           100000  NaN
    """
    names = keyed(activity, [*LABELS, "module"], ["module_path"])
    names = names.drop_duplicates(subset=[*LABELS, "module"])
    names["top"] = module_paths(names, 1)
    gaps = gaps.assign(next_module=filled(gaps["next_module"]))
    return gaps.merge(names.rename(columns={"module": "next_module"})[
        [*LABELS, "next_module", "top"]], on=[*LABELS, "next_module"], how="left")


def module_table(activity: pd.DataFrame, depth: int, steps: pd.DataFrame) -> pd.DataFrame:
    """Per label and module path cut to ``depth``: launches, kernels, GPU time per step::

        activity                           steps          out (depth 1)
        shape module_path    duration_ns   shape steps    shape module_path launches gpu_ns …
        s     Net/h/h.0/attn 4000        + s     2     -> s     Net/h       1.0      4000   …
        s     Net/h/h.1/mlp  4000

    Returns:
        :data:`MODULE_LAUNCH_COLUMNS`, labels in the order they first appear, most GPU time
        first within each.
    """
    work = activity.assign(module_path=module_paths(activity, depth),
                           _kernel=(activity["kind"] == "kernel").astype("float64"),
                           _small=((activity["kind"] == "kernel")
                                   & (activity["duration_ns"] < SMALL_KERNEL_NS))
                           .astype("float64"),
                           _kernel_ns=activity["duration_ns"].where(
                               activity["kind"] == "kernel"))
    keys = [*LABELS, "module_path"]
    out = work.groupby(keys, sort=False).agg(
        launches=("duration_ns", "size"), kernels=("_kernel", "sum"),
        gpu_ns=("duration_ns", "sum"), small=("_small", "sum"),
        median_kernel_ns=("_kernel_ns", "median")).reset_index()
    out = out.merge(steps, on=list(LABELS), how="left")
    out["small_kernel_pct"] = 100.0 * out["small"] / _positive(out["kernels"])
    per_step = ["launches", "kernels", "gpu_ns"]
    out[per_step] = out[per_step].astype("float64").div(out["steps"], axis=0)
    totals = out.groupby(list(LABELS), sort=False)["gpu_ns"].transform("sum")
    out["pct_of_gpu"] = 100.0 * out["gpu_ns"] / _positive(totals)
    out["module"] = out["module_path"].map(path_leaf)
    order = {label: i for i, label in enumerate(dict.fromkeys(zip(out["variant"],
                                                                  out["shape"], strict=True)))}
    out["_order"] = [order[label] for label in zip(out["variant"], out["shape"], strict=True)]
    out = out.sort_values(["_order", "gpu_ns"], ascending=[True, False], kind="stable")
    return out.loc[:, list(MODULE_LAUNCH_COLUMNS)].reset_index(drop=True)


@needs("source", "variant", "shape", "run", "kind", "duration_ns", "module_path")
def module_launches(kernels: pd.DataFrame, depth: int = 1) -> pd.DataFrame:
    """GPU time and launches per step of each top-level module.

    Args:
        kernels: a timeline source's activity table (``Profile.kernels``).
        depth: module level kept (root = 0, its children = 1); deeper ones fold into it.

    Returns:
        :data:`MODULE_LAUNCH_COLUMNS`, per (variant, shape) in the order they first appear,
        most GPU time first: ``launches`` (GPU activities of any kind), ``kernels`` and
        ``gpu_ns`` (of all its activities) per step, where the steps are the label's
        distinct ``(source, run)`` pairs; the share of the label's GPU time; the median
        kernel's duration and the share of kernels under :data:`SMALL_KERNEL_NS`.

    Raises:
        ValueError: ``depth`` is negative.
        MissingMetricError: the table lacks a column.
    """
    if depth < 0:
        raise ValueError(f"depth must be >= 0, got {depth}")
    activity = _keyed(kernels)
    steps = runs_per_group(activity, LABELS).rename(columns={"runs": "steps"})
    out = module_table(activity, depth, steps)
    for column in LABELS:
        out[column] = blank_to_none(out[column])
    return out
