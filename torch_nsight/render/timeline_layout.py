"""The layout of one measured step's timeline: which step is drawn, and where each row goes.

A step is chosen from the timeline's ``step`` rows (by shape, variant and run, or the step of
median wall time); its kernel rows get a GPU lane per (device, stream), a CPU lane per
launching thread, times in ms from the step window's start and their top-level module's
color (:func:`~torch_nsight.render.roofline_plot.top_level_module`, colored by
:func:`~torch_nsight.render.figure.module_colors`, as in the roofline and scaling charts);
its ``gap`` rows get the same times. No drawing: :mod:`~torch_nsight.render.timeline_plot`
draws the layout.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from torch_nsight.analyze.frames import filled
from torch_nsight.analyze.steps import STEP_KEYS
from torch_nsight.render.figure import extend_colors, module_colors
from torch_nsight.render.roofline_plot import top_level_module

if TYPE_CHECKING:
    from torch_nsight.profile import Profile

logger = logging.getLogger(__name__)

NO_TIMELINE = ("the profile has no timeline (it comes from Nsight Compute reports, which time "
               "kernels one by one); record a timeline with torch_nsight.timeline() or "
               "`torch-nsight timeline`")
NO_LABEL = "(unlabelled)"
#: Columns :func:`timeline_frame` adds to the kernel rows.
FRAME_COLUMNS = ("lane", "cpu_lane", "start_ms", "end_ms", "launch_ms", "top_module", "color")


@dataclass(frozen=True)
class StepLayout:
    """One measured step, chosen and laid out."""

    row: pd.Series          # the timeline's step row
    frame: pd.DataFrame     # its kernels with FRAME_COLUMNS
    gaps: pd.DataFrame      # its gap rows, with start_ms and end_ms
    gpu_lanes: list[str]
    cpu_lanes: list[str]
    steps: int              # how many steps of this (variant, shape) there were
    defaulted: bool         # run was None: the median-wall step was chosen


def is_absent(value: Any) -> bool:
    """Whether a label or id is missing (None, NaN, ``pd.NA``)."""
    return value is None or (isinstance(value, float) and math.isnan(value)) or value is pd.NA


def _thread(value: Any) -> Any:
    """A launch thread id, or None where unknown (traces write -1)."""
    if is_absent(value) or (isinstance(value, (int, float, np.number)) and value < 0):
        return None
    return value


def label_text(value: Any) -> str:
    """A shape or variant as written in messages and titles; a missing one ``(unlabelled)``."""
    return NO_LABEL if is_absent(value) else str(value)


def _where(table: pd.DataFrame, column: str, value: Any) -> pd.Series:
    """Rows whose ``column`` equals ``value`` (None matches missing values, or no column)."""
    if column not in table:
        return pd.Series(is_absent(value), index=table.index)
    values = table[column].astype(object)
    return values.map(is_absent) if is_absent(value) else values == value


def _values(table: pd.DataFrame, column: str) -> list[Any]:
    """Distinct values of ``column`` in order of appearance, missing ones as None."""
    if column not in table:
        return [None]
    return list(dict.fromkeys(None if is_absent(v) else v
                              for v in table[column].astype(object)))


def _pick(table: pd.DataFrame, column: str, wanted: Any, what: str) -> Any:
    """The value of ``column`` to draw: ``wanted``, or the only one there is."""
    values = _values(table, column)
    names = ", ".join(label_text(v) for v in values)
    if wanted is None:
        if len(values) > 1:
            raise ValueError(f"the timeline holds {len(values)} {what}s ({names}); pass "
                             f"{what}= one of them")
        return values[0]
    if wanted not in values:
        raise ValueError(f"{what} {wanted!r} is not in the timeline; it holds: {names}")
    return wanted


def _choose(timeline: pd.DataFrame, shape: str | None, variant: str | None,
            run: int | None) -> tuple[pd.Series, int]:
    """The step row to draw and how many steps its (variant, shape) has."""
    if not isinstance(timeline, pd.DataFrame):
        raise TypeError(f"timeline must be a DataFrame, got {type(timeline).__name__}")
    steps = timeline[timeline["kind"] == "step"]
    if steps.empty:
        raise ValueError("the timeline has no step windows; record at least one measured "
                         "step with torch_nsight.timeline() or `torch-nsight timeline`")
    chosen_shape = _pick(steps, "shape", shape, "shape")
    steps = steps[_where(steps, "shape", chosen_shape)]
    chosen_variant = _pick(steps, "variant", variant, "variant")
    steps = steps[_where(steps, "variant", chosen_variant)]
    if run is None:
        walls = (steps["end_ns"] - steps["start_ns"]).to_numpy(float)
        order = np.lexsort((steps["run"].to_numpy(float), walls))
        return steps.iloc[order[(len(order) - 1) // 2]], len(steps)
    matched = steps[_where(steps, "run", run)]
    if matched.empty:
        runs = ", ".join(map(str, sorted(dict.fromkeys(steps["run"].tolist()))))
        raise ValueError(f"run {run!r} is not a measured step of shape "
                         f"{label_text(chosen_shape)}; its steps are runs {runs}; pass run= "
                         "one of them or leave it out for the median step")
    if len(matched) > 1:
        logger.info("run %s of shape %s was recorded in %d sources; drawing the first (%s)",
                    run, label_text(chosen_shape), len(matched), matched.iloc[0].get("source"))
    return matched.iloc[0], len(steps)


def _of_step(table: pd.DataFrame, step: pd.Series) -> pd.Series:
    mask = pd.Series(True, index=table.index)
    for column in STEP_KEYS:
        if column in step.index and column in table:
            mask &= _where(table, column, step[column])
    return mask


def _cpu_lane_names(rows: pd.DataFrame) -> dict[Any, str]:
    """launch thread -> lane label: ``CPU main`` launches most outside backward, a
    mostly-backward thread is ``CPU autograd``, others ``CPU 2``, ``CPU 3``..."""
    launched = rows[rows["launch_ns"].notna()]
    if launched.empty:
        return {}
    threads = launched["launch_thread"] if "launch_thread" in launched \
        else pd.Series(None, index=launched.index, dtype=object)
    threads = threads.astype(object).map(_thread)
    counts = threads.value_counts(dropna=True)
    order = sorted(counts.index, key=lambda t: (-counts[t], str(t)))
    names: dict[Any, str] = {None: "CPU main"}
    direction = launched["direction"] if "direction" in launched \
        else pd.Series(None, index=launched.index, dtype=object)
    # the main thread is the one launching most outside backward (autograd launches the
    # backward from its own thread, often more kernels than the forward)
    backward = {t: (direction[threads == t] == "bwd").mean() > 0.5 for t in order}
    order = sorted(order, key=lambda t: (backward[t], -counts[t], str(t)))
    for index, thread in enumerate(order):
        if index == 0:
            names[thread] = "CPU main"
            continue
        name = "CPU autograd" if backward[thread] else f"CPU {index + 1}"
        if name in names.values():
            name = f"{name} {index + 1}"
        names[thread] = name
    return names


def _layout(profile: Profile, step: pd.Series, timeline: pd.DataFrame,
            steps: int, defaulted: bool) -> StepLayout:
    """The step's kernel rows placed on lanes, and its gaps, in ms from its start::

        kernels                                   frame (+ FRAME_COLUMNS)
        device stream start_ns  duration_ns     lane    cpu_lane start_ms end_ms top_module …
        0      7      5.0001e9  5.0e4       ->  GPU0 s7 CPU main 0.01     0.06   embed      …
    """
    kernels = profile.kernels
    rows = kernels[_of_step(kernels, step)].copy()
    rows = rows.sort_values("start_ns", kind="stable")
    origin = float(step["start_ns"])
    rows["kind"] = filled(rows["kind"], "kernel") \
        if "kind" in rows else "kernel"
    if "launch_ns" not in rows:
        rows["launch_ns"] = float("nan")
    rows["launch_ns"] = pd.to_numeric(rows["launch_ns"], errors="coerce")
    ids = {column: pd.to_numeric(rows[column], errors="coerce").fillna(-1).astype(int)
           if column in rows else pd.Series(0, index=rows.index) for column in ("device", "stream")}
    rows["lane"] = [f"GPU{d if d >= 0 else '?'} s{s if s >= 0 else '?'}"
                    for d, s in zip(ids["device"], ids["stream"], strict=True)]
    cpu_names = _cpu_lane_names(rows)
    threads = rows["launch_thread"].astype(object) if "launch_thread" in rows \
        else pd.Series(None, index=rows.index, dtype=object)
    rows["cpu_lane"] = pd.Series(
        [None if math.isnan(at) else cpu_names.get(_thread(t))
         for at, t in zip(rows["launch_ns"], threads, strict=True)], index=rows.index, dtype=object)
    rows["start_ms"] = (rows["start_ns"].astype(float) - origin) / 1e6
    rows["end_ms"] = rows["start_ms"] + rows["duration_ns"].astype(float) / 1e6
    rows["launch_ms"] = (rows["launch_ns"] - origin) / 1e6
    rows["top_module"] = rows["module_path"].map(top_level_module)
    colors = extend_colors(module_colors(profile, 1), rows["top_module"])
    rows["color"] = rows["top_module"].map(colors)
    keys = sorted(set(zip(ids["device"], ids["stream"], rows["lane"], strict=True)))
    gaps = timeline[(timeline["kind"] == "gap") & _of_step(timeline, step)].copy()
    gaps["start_ms"] = (gaps["start_ns"].astype(float) - origin) / 1e6
    gaps["end_ms"] = (gaps["end_ns"].astype(float) - origin) / 1e6
    return StepLayout(row=step, frame=rows, gaps=gaps, gpu_lanes=[k[2] for k in keys],
                      cpu_lanes=list(dict.fromkeys(cpu_names.values())) if cpu_names else [],
                      steps=steps, defaulted=defaulted)


def lay_out_step(profile: Profile, shape: str | None, run: int | None,
                 timeline: pd.DataFrame | None, variant: str | None) -> StepLayout:
    """Choose the step to draw (see :func:`timeline_frame`) and lay it out.

    Raises:
        ValueError: as :func:`timeline_frame`.
    """
    if timeline is None:
        timeline = getattr(profile, "timeline", None)
    if timeline is None:
        raise ValueError(NO_TIMELINE)
    step, steps = _choose(timeline, shape, variant, run)
    laid = _layout(profile, step, timeline, steps, defaulted=run is None)
    if laid.frame.empty:
        logger.info("step %s of shape %s has no GPU activity in the kernel table",
                    step["run"], label_text(step.get("shape")))
    return laid


def busy_ns(step: StepLayout) -> float:
    """The GPU's busy time in the step (ns): the step row's ``busy_ns``, else the union of
    its bars."""
    busy = pd.to_numeric(pd.Series([step.row.get("busy_ns")]), errors="coerce").iloc[0]
    if np.isfinite(busy):
        return float(busy)
    spans = sorted(zip(step.frame["start_ms"], step.frame["end_ms"], strict=True))
    total, reach = 0.0, -math.inf
    for start, end in spans:
        if end > reach:
            total += end - max(start, reach)
            reach = end
    return total * 1e6


def timeline_frame(profile: Profile, *, shape: str | None = None, run: int | None = None,
                   timeline: pd.DataFrame | None = None,
                   variant: str | None = None) -> pd.DataFrame:
    """Return the rows :func:`~torch_nsight.render.timeline_plot.plot_timeline` draws: the
    kernels of one step, placed.

    Args:
        profile: the profile.
        shape: the step's shape; needed only when the timeline holds several.
        run: the measured step (its ``run``); None picks the step of median wall time.
        timeline: the step and gap table; None uses ``profile.timeline``.
        variant: the step's variant; needed only when the shape has several.

    Returns:
        The step's kernel rows (copies and memsets too) in order of GPU start, with
        ``lane`` (``GPU0 s7``), ``cpu_lane`` (``CPU main``...; None without a launch time),
        ``start_ms``, ``end_ms`` and ``launch_ms`` (from the step window's start),
        ``top_module`` and ``color`` (as :func:`~torch_nsight.render.figure.module_colors`).

    Raises:
        ValueError: no timeline, or the shape, variant or run is not in it (or is needed).
    """
    return lay_out_step(profile, shape, run, timeline, variant).frame.reset_index(drop=True)
