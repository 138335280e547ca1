"""The drawing of one measured step's timeline (matplotlib): what each GPU stream ran, when the
CPU launched it, and where the GPU sat idle.

One lane per GPU (device, stream) holds a bar per kernel, colored by its top-level module;
copies and memsets are hatched. CPU lanes above them hold a tick at each launch, colored
like the kernel it launched, one lane per launching thread. The step's idle gaps (rows
``kind == "gap"`` of the profile's timeline table) are shaded across the GPU lanes and the
largest are labelled with their length. Which step, and where each row goes, is
:mod:`~torch_nsight.render.timeline_layout`'s.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from torch_nsight.render.figure import PathArg, check_figure_path, new_figure, save_figure
from torch_nsight.render.timeline_layout import (
    StepLayout,
    busy_ns,
    is_absent,
    label_text,
    lay_out_step,
)
from torch_nsight.units import counted, format_duration

if TYPE_CHECKING:
    from torch_nsight.profile import Profile

logger = logging.getLogger(__name__)

KINDS: dict[str, tuple[str, str]] = {"memcpy": ("copy", "////"), "memset": ("memset", "xxxx")}
GAP_COLOR = "#f6c6c6"
GAP_TEXT_COLOR = "#b22222"
MAX_LEGEND_MODULES = 10
LABELLED_GAPS = 3
#: Narrowest bar drawn, in pixels, so that 1-µs kernels stay visible.
MIN_BAR_PIXELS = 1.2


def _ms(duration_ns: float) -> str:
    """``12.345 ms``: a time in the plot's text, in ms."""
    return format_duration(duration_ns, unit="ms", decimals=3)


def _title(profile: Profile, step: StepLayout) -> str:
    row = step.row
    wall_ns = float(row["end_ns"] - row["start_ns"])
    busy = busy_ns(step)
    share = 100.0 * busy / wall_ns if wall_ns > 0 else float("nan")
    variant = "" if is_absent(row.get("variant")) else f", variant {row['variant']}"
    gpus = ", ".join(map(str, profile.gpus))
    chosen = f" (median of {step.steps} steps)" if step.defaulted and step.steps > 1 else ""
    kinds = step.frame["kind"].value_counts()
    facts = [f"wall {_ms(wall_ns)}", f"GPU busy {share:.1f}% ({_ms(busy)})",
             counted(int(kinds.get('kernel', 0)), "kernel")]
    bare = pd.to_numeric(pd.Series([row.get("bare_ns")]), errors="coerce").iloc[0]
    if np.isfinite(bare) and bare > 0:  # the profiler lengthens the CPU side only
        facts[1] += (f" = {min(100.0, 100.0 * busy / bare):.0f}% of the {_ms(bare)} "
                     "step timed without profiler")
    copies = int(kinds.get("memcpy", 0) + kinds.get("memset", 0))
    if copies:
        facts.append(f"{copies} copies/memsets")
    if len(step.gaps):
        gaps_ms = float((step.gaps["end_ms"] - step.gaps["start_ms"]).sum())
        facts.append(f"{len(step.gaps)} idle gaps ({gaps_ms:.3f} ms)")
    sync = pd.to_numeric(pd.Series([row.get("sync_ns")]), errors="coerce").iloc[0]
    if np.isfinite(sync) and sync > 0:
        facts.append(f"CPU waiting in syncs {_ms(sync)}")
    return (f"Timeline of shape {label_text(row.get('shape'))}{variant}, step {row['run']}"
            f"{chosen}{': ' + gpus if gpus else ''}\n" + ", ".join(facts))


def _module_handles(frame: pd.DataFrame) -> list[Patch]:
    """Top-level modules, longest first; past :data:`MAX_LEGEND_MODULES`, one ``other``."""
    times = frame.groupby("top_module", sort=False)["duration_ns"].sum() \
        .sort_values(ascending=False, kind="stable")
    colors = frame.groupby("top_module", sort=False)["color"].first()
    shown = times if len(times) <= MAX_LEGEND_MODULES else times.iloc[:MAX_LEGEND_MODULES - 1]
    handles = [Patch(facecolor=colors[name], label=f"{name}  {_ms(ns)}")
               for name, ns in shown.items()]
    rest = times.iloc[len(shown):]
    if len(rest):
        handles.append(Patch(facecolor="white", edgecolor="0.5",
                             label=f"other: {counted(len(rest), 'module')}  {_ms(rest.sum())}"))
    return handles


def _legend(figure: Figure, step: StepLayout) -> None:
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
        ValueError: as :func:`~torch_nsight.render.timeline_layout.timeline_frame`, or the
            profile holds no GPU activity (a trace recorded without a CUDA device: there is
            no GPU time line to draw).
    """
    if profile.kernels.empty:
        raise ValueError(NO_GPU_ACTIVITY)
    step = lay_out_step(profile, shape, run, timeline, variant)
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
    kernel, colored by top-level module (the roofline's colors, unattributed grey);
    copies and memsets are hatched; every bar is at least a pixel wide. CPU lanes above
    hold a tick at each launch, colored like the kernel it launched: ``CPU main`` for the
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

