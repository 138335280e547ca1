"""The timeline of one measured step: what each GPU stream ran, when the CPU launched it,
and where the GPU sat idle.

One lane per GPU (device, stream) holds a bar per kernel, coloured by its top-level module
(:func:`~torch_nsight.render.roofline.top_level_module`, coloured by
:func:`~torch_nsight.render.figure.module_colors`, as in the roofline and scaling charts);
copies and memsets are hatched. CPU lanes above them hold a tick at each launch, coloured
like the kernel it launched, one lane per launching thread. The step's idle gaps (rows
``kind == "gap"`` of the profile's timeline table) are shaded across the GPU lanes and the
largest are labelled with their length.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from torch_nsight.analyze.frames import filled
from torch_nsight.render.figure import (
    PathArg,
    check_figure_path,
    extend_colors,
    module_colors,
    new_figure,
    save_figure,
)
from torch_nsight.render.roofline import top_level_module

if TYPE_CHECKING:
    from torch_nsight.profile import Profile

logger = logging.getLogger(__name__)

NO_TIMELINE = ("the profile has no timeline (it comes from Nsight Compute reports, which time "
               "kernels one by one); record a timeline with torch_nsight.timeline() or "
               "`torch-nsight timeline`")
NO_LABEL = "(unlabelled)"
KINDS: dict[str, tuple[str, str]] = {"memcpy": ("copy", "////"), "memset": ("memset", "xxxx")}
GAP_COLOR = "#f6c6c6"
GAP_TEXT_COLOR = "#b22222"
MAX_LEGEND_MODULES = 10
LABELLED_GAPS = 3
#: Narrowest bar drawn, in pixels, so that 1-µs kernels stay visible.
MIN_BAR_PIXELS = 1.2
#: Columns :func:`timeline_frame` adds to the kernel rows.
FRAME_COLUMNS = ("lane", "cpu_lane", "start_ms", "end_ms", "launch_ms", "top_module", "color")


@dataclass(frozen=True)
class _Step:
    """One measured step, chosen and laid out."""

    row: pd.Series          # the timeline's step row
    frame: pd.DataFrame     # its kernels with FRAME_COLUMNS
    gaps: pd.DataFrame      # its gap rows, with start_ms and end_ms
    gpu_lanes: list[str]
    cpu_lanes: list[str]
    steps: int              # how many steps of this (variant, shape) there were
    defaulted: bool         # run was None: the median-wall step was chosen


def _missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value)) or value is pd.NA


def _thread(value: Any) -> Any:
    """A launch thread id, or None where unknown (traces write -1)."""
    if _missing(value) or (isinstance(value, (int, float, np.number)) and value < 0):
        return None
    return value


def _name(value: Any) -> str:
    return NO_LABEL if _missing(value) else str(value)


def _where(table: pd.DataFrame, column: str, value: Any) -> pd.Series:
    """Rows whose ``column`` equals ``value`` (None matches missing values, or no column)."""
    if column not in table:
        return pd.Series(_missing(value), index=table.index)
    values = table[column].astype(object)
    return values.map(_missing) if _missing(value) else values == value


def _values(table: pd.DataFrame, column: str) -> list[Any]:
    """Distinct values of ``column`` in order of appearance, missing ones as None."""
    if column not in table:
        return [None]
    return list(dict.fromkeys(None if _missing(v) else v for v in table[column].astype(object)))


def _pick(table: pd.DataFrame, column: str, wanted: Any, what: str) -> Any:
    """The value of ``column`` to draw: ``wanted``, or the only one there is."""
    values = _values(table, column)
    names = ", ".join(_name(v) for v in values)
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
        raise ValueError(f"run {run!r} is not a measured step of shape {_name(chosen_shape)}; "
                         f"its steps are runs {runs}; pass run= one of them or leave it out "
                         "for the median step")
    if len(matched) > 1:
        logger.info("run %s of shape %s was recorded in %d sources; drawing the first (%s)",
                    run, _name(chosen_shape), len(matched), matched.iloc[0].get("source"))
    return matched.iloc[0], len(steps)


def _of_step(table: pd.DataFrame, step: pd.Series) -> pd.Series:
    mask = pd.Series(True, index=table.index)
    for column in ("source", "variant", "shape", "run"):
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
            steps: int, defaulted: bool) -> _Step:
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
    return _Step(row=step, frame=rows, gaps=gaps, gpu_lanes=[k[2] for k in keys],
                 cpu_lanes=list(dict.fromkeys(cpu_names.values())) if cpu_names else [],
                 steps=steps, defaulted=defaulted)


def _select(profile: Profile, shape: str | None, run: int | None,
            timeline: pd.DataFrame | None, variant: str | None) -> _Step:
    if timeline is None:
        timeline = getattr(profile, "timeline", None)
    if timeline is None:
        raise ValueError(NO_TIMELINE)
    step, steps = _choose(timeline, shape, variant, run)
    laid = _layout(profile, step, timeline, steps, defaulted=run is None)
    if laid.frame.empty:
        logger.info("step %s of shape %s has no GPU activity in the kernel table",
                    step["run"], _name(step.get("shape")))
    return laid


def timeline_frame(profile: Profile, *, shape: str | None = None, run: int | None = None,
                   timeline: pd.DataFrame | None = None,
                   variant: str | None = None) -> pd.DataFrame:
    """Return the rows :func:`plot_timeline` draws: the kernels of one step, placed.

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
    return _select(profile, shape, run, timeline, variant).frame.reset_index(drop=True)


def _busy_ns(step: _Step) -> float:
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


def _title(profile: Profile, step: _Step) -> str:
    row = step.row
    wall_ns = float(row["end_ns"] - row["start_ns"])
    busy = _busy_ns(step)
    share = 100.0 * busy / wall_ns if wall_ns > 0 else float("nan")
    variant = "" if _missing(row.get("variant")) else f", variant {row['variant']}"
    gpus = ", ".join(map(str, profile.gpus))
    chosen = f" (median of {step.steps} steps)" if step.defaulted and step.steps > 1 else ""
    kinds = step.frame["kind"].value_counts()
    facts = [f"wall {wall_ns / 1e6:.3f} ms", f"GPU busy {share:.1f}% ({busy / 1e6:.3f} ms)",
             f"{int(kinds.get('kernel', 0))} kernels"]
    bare = pd.to_numeric(pd.Series([row.get("bare_ns")]), errors="coerce").iloc[0]
    if np.isfinite(bare) and bare > 0:  # the profiler lengthens the CPU side only
        facts[1] += (f" = {min(100.0, 100.0 * busy / bare):.0f}% of the {bare / 1e6:.3f} ms "
                     "step timed without profiler")
    copies = int(kinds.get("memcpy", 0) + kinds.get("memset", 0))
    if copies:
        facts.append(f"{copies} copies/memsets")
    if len(step.gaps):
        gaps_ms = float((step.gaps["end_ms"] - step.gaps["start_ms"]).sum())
        facts.append(f"{len(step.gaps)} idle gaps ({gaps_ms:.3f} ms)")
    sync = pd.to_numeric(pd.Series([row.get("sync_ns")]), errors="coerce").iloc[0]
    if np.isfinite(sync) and sync > 0:
        facts.append(f"CPU waiting in syncs {sync / 1e6:.3f} ms")
    return (f"Timeline of shape {_name(row.get('shape'))}{variant}, step {row['run']}{chosen}"
            f"{': ' + gpus if gpus else ''}\n" + ", ".join(facts))


def _module_handles(frame: pd.DataFrame) -> list[Patch]:
    """Top-level modules, longest first; past :data:`MAX_LEGEND_MODULES`, one ``other``."""
    times = frame.groupby("top_module", sort=False)["duration_ns"].sum() \
        .sort_values(ascending=False, kind="stable")
    colors = frame.groupby("top_module", sort=False)["color"].first()
    shown = times if len(times) <= MAX_LEGEND_MODULES else times.iloc[:MAX_LEGEND_MODULES - 1]
    handles = [Patch(facecolor=colors[name], label=f"{name}  {ns / 1e6:.3f} ms")
               for name, ns in shown.items()]
    rest = times.iloc[len(shown):]
    if len(rest):
        handles.append(Patch(facecolor="white", edgecolor="0.5",
                             label=f"other: {len(rest)} modules  {rest.sum() / 1e6:.3f} ms"))
    return handles


def _legend(figure: Figure, step: _Step) -> None:
    handles: list[Any] = _module_handles(step.frame)
    for kind, (label, hatch) in KINDS.items():
        if (step.frame["kind"] == kind).any():
            handles.append(Patch(facecolor="white", edgecolor="black", hatch=hatch,
                                 linewidth=0.5, label=label))
    if len(step.gaps):
        handles.append(Patch(facecolor=GAP_COLOR, label="GPU idle"))
    if step.cpu_lanes:
        handles.append(Line2D([], [], color="0.3", linewidth=1.0, marker="|", linestyle="",
                              markersize=9, label="CPU launch"))
    figure.legend(handles=handles, loc="outside lower center", ncol=max(1, min(len(handles), 5)),
                  fontsize=8, title="top-level module (GPU time in step)", title_fontsize=8,
                  frameon=False)


def _bars(ax: Axes, rows: pd.DataFrame, y: float, min_width: float) -> None:
    """One collection per kind on one GPU lane; each bar at least ``min_width`` wide."""
    for kind, part in rows.groupby("kind", sort=False):
        widths = np.maximum(part["end_ms"].to_numpy(float) - part["start_ms"].to_numpy(float),
                            min_width)
        label, hatch = KINDS.get(str(kind), ("kernel", None))
        collection = ax.broken_barh(
            list(zip(part["start_ms"].to_numpy(float), widths, strict=True)), (y - 0.38, 0.76),
            facecolors=list(part["color"]), edgecolors="black" if hatch else "white",
            linewidth=0.0 if hatch else 0.3, hatch=hatch, zorder=3)
        collection.set_gid(f"{label}-bars")


def _label_gaps(ax: Axes, gaps: pd.DataFrame, y: float, pixel_ms: float) -> None:
    """Label the longest gaps by their length, stacked where labels would collide."""
    longest = gaps.assign(_ms=gaps["end_ms"] - gaps["start_ms"]) \
        .sort_values("_ms", ascending=False, kind="stable").head(LABELLED_GAPS)
    placed: list[tuple[float, float, int]] = []  # centre, half width (ms), level
    for _, gap in longest.sort_values("start_ms").iterrows():
        text = f"{gap['_ms'] * 1e3:,.0f} µs idle"
        if isinstance(gap.get("cpu"), str) and gap["cpu"]:
            text += f" (CPU: {gap['cpu']})"
        centre = (gap["start_ms"] + gap["end_ms"]) / 2
        half = (len(text) * 3.4 + 6) * pixel_ms  # half the text's width at 8 pt, in ms
        level = 0
        while any(abs(centre - x) < half + other and lv == level for x, other, lv in placed):
            level += 1
        placed.append((centre, half, level))
        ax.annotate(text, (centre, y), xytext=(0, 2 + 10 * level), textcoords="offset points",
                    ha="center", va="bottom", fontsize=8, color=GAP_TEXT_COLOR, zorder=5,
                    gid="gap-label")


def _pixel_ms(figure: Figure, ax: Axes) -> float:
    """One pixel of ``ax``, in ms, once the layout is done."""
    figure.draw_without_rendering()
    width = ax.get_window_extent().width
    low, high = ax.get_xlim()
    return (high - low) / width if width > 0 else 0.0


#: Why a trace recorded without a CUDA device has no timeline plot.
NO_GPU_ACTIVITY = ("the profile holds no GPU activity (recorded without a CUDA device): there "
                   "is no GPU time line to draw; its CPU ops are in the trace, for Perfetto")


def timeline_figure(profile: Profile, *, shape: str | None = None, run: int | None = None,
                    timeline: pd.DataFrame | None = None,
                    variant: str | None = None) -> Figure:
    """Draw one measured step's timeline and return the figure (see :func:`plot_timeline`).

    Returns:
        The figure. Its axes hold collections with gid ``kernel-bars``, ``copy-bars``,
        ``memset-bars`` (one per GPU lane and kind), ``launch-ticks`` (one per CPU lane),
        ``idle-gaps``, and texts with gid ``gap-label``; y tick labels name the lanes.

    Raises:
        ValueError: as :func:`timeline_frame`, or the profile holds no GPU activity (a
            trace recorded without a CUDA device: there is no GPU time line to draw).
    """
    if profile.kernels.empty:
        raise ValueError(NO_GPU_ACTIVITY)
    step = _select(profile, shape, run, timeline, variant)
    frame = step.frame
    lanes = [*step.cpu_lanes, *step.gpu_lanes]
    # Room above the GPU lanes (under the CPU lanes) for the gap labels.
    band = 0.9 if step.cpu_lanes or len(step.gaps) else 0.0
    y_of: dict[str, float] = {lane: i for i, lane in enumerate(step.cpu_lanes)}
    y_of.update({lane: len(step.cpu_lanes) + band + i for i, lane in enumerate(step.gpu_lanes)})
    wall_ms = float(step.row["end_ns"] - step.row["start_ns"]) / 1e6
    edges = [0.0, wall_ms, *frame["start_ms"], *frame["end_ms"], *frame["launch_ms"].dropna()]
    low, high = min(edges), max(edges)
    pad = 0.01 * (high - low or 1.0)

    figure = new_figure(14.0, 2.4 + 0.5 * (len(lanes) + band))
    ax = figure.subplots()
    ax.set_xlim(low - pad, high + pad)
    top = -0.6
    bottom = (y_of[step.gpu_lanes[-1]] if step.gpu_lanes else len(lanes)) + 0.6
    ax.set_ylim(bottom, top)
    ax.set_yticks([y_of[lane] for lane in lanes], lanes, fontsize=9)
    ax.set_xlabel("time from the step's start (ms)")
    ax.grid(axis="x", alpha=0.3)
    ax.set_axisbelow(True)
    for edge in (0.0, wall_ms):
        ax.axvline(edge, color="0.4", linestyle="--", linewidth=0.8, zorder=1)
    if step.cpu_lanes and step.gpu_lanes:
        ax.axhline(len(step.cpu_lanes) - 0.5, color="0.75", linewidth=0.6)
    ax.set_title(_title(profile, step), fontsize=10, loc="left")
    _legend(figure, step)
    pixel_ms = _pixel_ms(figure, ax)

    gpu_top = len(step.cpu_lanes) + band - 0.5
    if len(step.gaps):
        spans = list(zip(step.gaps["start_ms"], step.gaps["end_ms"] - step.gaps["start_ms"],
                         strict=True))
        shade = ax.broken_barh(spans, (gpu_top, bottom - gpu_top), facecolors=GAP_COLOR,
                               edgecolors="none", zorder=2)
        shade.set_gid("idle-gaps")
        _label_gaps(ax, step.gaps, gpu_top, pixel_ms)
    for lane in step.gpu_lanes:
        _bars(ax, frame[frame["lane"] == lane], y_of[lane], MIN_BAR_PIXELS * pixel_ms)
    for lane in step.cpu_lanes:
        part = frame[frame["cpu_lane"] == lane]
        ticks = ax.vlines(part["launch_ms"], y_of[lane] - 0.35, y_of[lane] + 0.35,
                          colors=list(part["color"]), linewidth=0.9, zorder=3)
        ticks.set_gid("launch-ticks")
    logger.debug("timeline: %d rows on %d GPU lanes, %d CPU lanes, %d gaps", len(frame),
                  len(step.gpu_lanes), len(step.cpu_lanes), len(step.gaps))
    return figure


def plot_timeline(profile: Profile, path: PathArg, *, shape: str | None = None,
                  run: int | None = None, timeline: pd.DataFrame | None = None,
                  variant: str | None = None) -> Path:
    """Draw one measured step as a timeline and save it (PNG or SVG by suffix).

    x is time in ms from the step window's start (dashed lines mark the window). Each GPU
    (device, stream) with activity in the step is a lane (``GPU0 s7``) of bars, one per
    kernel, coloured by top-level module (the roofline's colours, unattributed grey);
    copies and memsets are hatched; every bar is at least a pixel wide. CPU lanes above
    hold a tick at each launch, coloured like the kernel it launched: ``CPU main`` for the
    thread that launched most, ``CPU autograd`` for a mostly-backward thread, ``CPU 2``...
    for others. The step's idle gaps are shaded red across the GPU lanes, the longest three
    labelled in µs (with what the CPU was doing). The title gives shape, step, wall time
    and GPU busy share; the legend lists the top-level modules by GPU time in the step.

    Args:
        profile: the profile.
        path: where to save it (``.png`` or ``.svg``).
        shape: the step's shape; needed only when the timeline holds several.
        run: the measured step (its ``run``); None picks the step of median wall time.
        timeline: the step and gap table; None uses ``profile.timeline``.
        variant: the step's variant; needed only when the shape has several.

    Returns:
        The path written.

    Raises:
        ValueError: ``path`` has another suffix, the profile has no timeline (it comes from
            Nsight Compute reports) or no GPU activity, or the shape, variant or run is not
            in it (or is needed to choose).
        OSError: the file cannot be written.
    """
    target = check_figure_path(path)
    if target is None:
        raise ValueError("path is required: where to save the timeline (.png or .svg)")
    figure = timeline_figure(profile, shape=shape, run=run, timeline=timeline,
                             variant=variant)
    save_figure(figure, target)
    return target

