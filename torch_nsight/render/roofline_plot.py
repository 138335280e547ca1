"""The roofline chart: every kernel placed by FLOP per DRAM byte and achieved FLOP/s.

Roofs come from the report itself (``peak_bytes_per_s`` and ``peak_flops_per_s`` of the
kernel table, see docs/roofline.md), never from datasheets. Peaks vary with the clock each
kernel ran at; a roof is drawn at the highest peak seen for its precision, so every kernel
sits under its own roof. Kernels without FLOPs (copies, conversions) or without DRAM bytes
have no place on log axes: they are drawn in a strip under the chart, by time, with a note.
"""

from __future__ import annotations

import logging
import math
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import EngFormatter, FuncFormatter, LogLocator

from torch_nsight.errors import MissingMetricError
from torch_nsight.render.figure import (
    PathArg,
    block_groups,
    check_figure_path,
    extend_colors,
    module_colors,
    new_figure,
    own_kernels,
    save_figure,
)
from torch_nsight.render.readable_numbers import format_rate
from torch_nsight.units import counted
from torch_nsight.vocabulary import OUTSIDE_PREFIX, UNATTRIBUTED, split_path

if TYPE_CHECKING:
    from torch_nsight.profile import Profile

logger = logging.getLogger(__name__)

DIRECTION_MARKERS: dict[str, str] = {"fwd": "o", "bwd": "^", "step": "D"}
OTHER_MARKER = "s"
MAX_MARKER_AREA = 420.0
MIN_MARKER_AREA = 14.0


def top_level_module(module_path: Any) -> str:
    """Return the first module under the root in a module path, for coloring.

    Args:
        module_path: ``Root/child/child.grandchild``, the root alone, or
            ``(unattributed)``.

    Returns:
        ``child``; ``Root (own kernels)`` for kernels of the root itself;
        ``(unattributed)`` for kernels outside any module.
    """
    if not isinstance(module_path, str) or module_path == UNATTRIBUTED:
        return UNATTRIBUTED
    if module_path.startswith(OUTSIDE_PREFIX):  # a call of the loop's own, not the root's
        return module_path
    parts = split_path(module_path)
    return parts[1] if len(parts) > 1 else own_kernels(parts[0])


def precision_label(precisions: tuple[str, ...]) -> str:
    """Return a reader's name for precision values: ``("tensor_bf16",)`` -> ``bf16 tensor core``.

    Args:
        precisions: values of the ``precision`` column sharing one roof.

    Returns:
        For example ``fp32, fp16 CUDA core`` or ``bf16 tensor core, fp32 CUDA core``.
    """
    tensor = [p[len("tensor_"):] for p in precisions if p.startswith("tensor_")]
    cuda = [p for p in precisions if not p.startswith("tensor_")]
    parts = ([f"{', '.join(tensor)} tensor core"] if tensor else []) + \
        ([f"{', '.join(cuda)} CUDA core"] if cuda else [])
    return ", ".join(parts)


def placeable(kernels: pd.DataFrame) -> pd.Series:
    """Return which kernels can sit on log-log roofline axes.

    Args:
        kernels: a classified kernel table.

    Returns:
        True where FLOPs, intensity and achieved FLOP/s are all finite and positive.
    """
    mask = pd.Series(True, index=kernels.index)
    for column in ("flops", "intensity", "achieved_flops_per_s"):
        values = pd.to_numeric(kernels[column], errors="coerce")
        mask &= np.isfinite(values) & (values > 0)
    return mask


def _marker(direction: Any) -> str:
    return DIRECTION_MARKERS.get(direction, OTHER_MARKER) if isinstance(direction, str) \
        else OTHER_MARKER


def _areas(durations: pd.Series, longest: float) -> np.ndarray:
    return np.maximum(MAX_MARKER_AREA * durations.to_numpy(float) / longest, MIN_MARKER_AREA)


def _scatter(ax: Axes, rows: pd.DataFrame, x: pd.Series, y: Any, colors: dict[str, str],
             longest: float, gid: str) -> None:
    """One collection per (module, direction): color by module, marker by direction."""
    groups = rows.assign(_x=x, _y=y).groupby(["_group", "_marker"], sort=False)
    for (group, marker), part in groups:
        collection = ax.scatter(part["_x"], part["_y"], s=_areas(part["duration_ns"], longest),
                                c=colors[group], marker=marker, alpha=0.8,
                                edgecolors="black", linewidths=0.5, zorder=3)
        collection.set_gid(gid)


def compute_roofs(kernels: pd.DataFrame) -> dict[tuple[str, ...], float]:
    """Return the compute roofs to draw: the highest peak FLOP/s seen per precision.

    Precisions whose peaks lie within 1% of each other (fp32 and fp16 CUDA cores on
    Hopper) share one roof.

    Args:
        kernels: classified kernel rows (``precision``, ``peak_flops_per_s``).

    Returns:
        (precision, ...) -> peak FLOP/s, highest first; ``none`` and unknown are skipped.
    """
    peaks: dict[str, float] = {}
    for precision, part in kernels.groupby("precision", sort=False):
        peak = pd.to_numeric(part["peak_flops_per_s"], errors="coerce").max()
        if isinstance(precision, str) and precision != "none" and np.isfinite(peak) \
                and peak > 0:  # a peak of zero is no roof
            peaks[precision] = float(peak)
    roofs: dict[tuple[str, ...], float] = {}
    for precision, peak in sorted(peaks.items(), key=lambda item: -item[1]):
        shared = next((key for key, value in roofs.items()
                       if abs(value - peak) <= 0.01 * value), None)
        if shared is None:
            roofs[(precision,)] = peak
        else:
            # not roofs[(*shared, precision)]: mypy (target 3.10) takes it for 3.11's x[*a]
            roofs[shared + (precision,)] = roofs.pop(shared)
    return dict(sorted(roofs.items(), key=lambda item: -item[1]))


def _limits(values: list[float], low: float, high: float) -> tuple[float, float]:
    finite = [v for v in values if np.isfinite(v) and v > 0] or [1.0]
    return (10.0 ** math.floor(math.log10(min(finite) * low)),
            10.0 ** math.ceil(math.log10(max(finite) * high)))


def _draw_roofs(ax: Axes, bandwidth: float, peaks: dict[tuple[str, ...], float],
                xlim: tuple[float, float]) -> list[Line2D]:
    """Draw the memory roof and one compute roof per precision; return their lines."""
    lines: list[Line2D] = []
    top_ridge = max(peaks.values()) / bandwidth if peaks else xlim[1]
    if np.isfinite(bandwidth):
        xs = np.array([xlim[0], min(top_ridge, xlim[1])])
        (line,) = ax.plot(xs, bandwidth * xs, color="black", linewidth=2.0, zorder=2,
                          label=f"DRAM roof, {format_rate(bandwidth, 'B/s')}")
        line.set_gid("memory-roof")
        lines.append(line)
    styles = ("-", "--", "-.", ":")
    for index, (precision, peak) in enumerate(peaks.items()):
        ridge = peak / bandwidth if np.isfinite(bandwidth) else xlim[0]
        (line,) = ax.plot([ridge, xlim[1]], [peak, peak], color="dimgray", zorder=2,
                          linewidth=1.8, linestyle=styles[index % len(styles)],
                          label=f"{precision_label(precision)} roof, "
                                f"{format_rate(peak, 'FLOP/s')}")
        line.set_gid(f"compute-roof:{'+'.join(precision)}")
        ax.annotate(precision_label(precision), (xlim[1], peak), xytext=(-4, 3),
                    textcoords="offset points", ha="right", va="bottom", fontsize=8,
                    color="dimgray")
        lines.append(line)
    return lines


def _draw_strip(strip: Axes, rows: pd.DataFrame, colors: dict[str, str], longest: float,
                total_ns: float) -> None:
    """The kernels that cannot sit on log axes, placed by their time."""
    times_us = rows["duration_ns"].astype(float) / 1e3
    _scatter(strip, rows, times_us, np.zeros(len(rows)), colors, longest, "unplaced-kernels")
    strip.set_yticks([])
    strip.set_ylim(-1, 1)
    strip.set_xlim(0, times_us.max() * 1.15)
    strip.set_xlabel("kernel time (µs)")
    share = 100.0 * rows["duration_ns"].sum() / total_ns if total_ns else float("nan")
    strip.set_title(f"{len(rows)} kernel(s) without FLOPs or DRAM bytes cannot sit on log "
                    f"axes: shown here by time ({rows['duration_ns'].sum() / 1e3:,.1f} µs, "
                    f"{share:.1f}% of GPU time)", fontsize=9, loc="left")
    strip.grid(axis="x", alpha=0.3)


def _legends(figure: Figure, colors: dict[str, str], directions: list[str],
             roofs: list[Line2D]) -> None:
    module_handles = [Line2D([], [], linestyle="", marker="o", markersize=8, color=color,
                             markeredgecolor="black", markeredgewidth=0.5, label=name)
                      for name, color in colors.items()]
    figure.legend(handles=module_handles, loc="outside right upper",
                  title="top-level module", fontsize=9, title_fontsize=9)
    names = {"fwd": "forward", "bwd": "backward", "step": "optimizer step"}
    other = [Line2D([], [], linestyle="", marker=_marker(d), markersize=7, color="white",
                    markeredgecolor="black", label=names.get(d, "outside fwd/bwd"))
             for d in directions]
    figure.legend(handles=[*other, *roofs], loc="outside right lower", fontsize=8,
                  title="marker area ∝ kernel time", title_fontsize=8)


def _gpu(profile: Profile) -> str:
    return ", ".join(map(str, profile.gpus)) or "unknown GPU"


def _shapes(kernels: pd.DataFrame) -> list[str]:
    return [str(s) for s in dict.fromkeys(kernels["shape"].tolist()) if isinstance(s, str)]


def _shape_kernels(kernels: pd.DataFrame, shape: str | None,
                   shapes: list[str]) -> pd.DataFrame:
    """The kernels of ``shape`` (all of them for None).

    Raises:
        ValueError: ``shape`` is not among ``shapes``, or there is no kernel to plot.
    """
    if shape is not None:
        if shape not in shapes:
            raise ValueError(f"shape {shape!r} is not in the profile; it holds: "
                             f"{', '.join(shapes) or 'no labelled shapes'}")
        kernels = kernels[kernels["shape"] == shape]
    if kernels.empty:
        raise ValueError("the profile has no kernels to plot")
    return kernels


def _draw_chart(ax: Axes, placed: pd.DataFrame, bandwidth: float, colors: dict[str, str],
                longest: float) -> list[Line2D]:
    """The log-log chart on ``ax``: limits, roofs, the placed kernels, labels and grid;
    return the roofs' lines (for the legend)."""
    ax.set_xscale("log")
    ax.set_yscale("log")
    peaks = compute_roofs(placed)
    ridges = [p / bandwidth for p in peaks.values()] if np.isfinite(bandwidth) else []
    xlim = _limits([*placed["intensity"].astype(float), *ridges], 0.5, 3.0)
    ylim = _limits([*placed["achieved_flops_per_s"].astype(float)], 0.5, 1.0)
    ylim = (ylim[0], max([ylim[1], *(2.5 * p for p in peaks.values())]))
    ax.set_xlim(xlim)
    ax.set_ylim(ylim)
    roofs = _draw_roofs(ax, bandwidth, peaks, xlim)
    _scatter(ax, placed, placed["intensity"].astype(float),
             placed["achieved_flops_per_s"].astype(float), colors, longest, "kernel-points")
    ax.set_xlabel("arithmetic intensity (FLOP per DRAM byte)")
    ax.set_ylabel("achieved FLOP/s")
    ax.yaxis.set_major_formatter(EngFormatter(unit="FLOP/s", places=0))
    ax.xaxis.set_major_locator(LogLocator(base=10))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
    ax.grid(which="major", alpha=0.3)
    ax.grid(which="minor", alpha=0.08)
    return roofs


def _directions(directions: pd.Series) -> list[str]:
    """The legend's markers: the directions present (``other`` for the rest), in
    :data:`DIRECTION_MARKERS` order."""
    present = {d if isinstance(d, str) and d in DIRECTION_MARKERS else "other"
               for d in directions}
    return [d for d in (*DIRECTION_MARKERS, "other") if d in present]


def raise_unplaceable(profile: Profile) -> None:
    """Raise if no kernel of ``profile`` can be placed on the roofline (say what to record).

    Raises:
        MissingMetricError: no kernel has its FLOP and DRAM byte counts.
    """
    if len(profile.kernels) and placeable(profile.kernels).any():
        return
    if profile.meta.sources and all(s.metric_set == "timeline" for s in profile.meta.sources):
        raise MissingMetricError(
            "no kernel can be placed on the roofline: a PyTorch profiler trace has no FLOP or "
            "DRAM byte counters; the roofline needs the Nsight Compute pass (torch_nsight.sweep, "
            "`torch-nsight profile -- COMMAND`)")
    record = ("Record it with `torch-nsight profile -- COMMAND` (`torch-nsight profile "
              "--dry-run -- python x.py` prints the ncu flags and metrics) or "
              "torch_nsight.sweep")
    if not len(profile.kernels):
        raise MissingMetricError(
            "no kernel can be placed on the roofline: the profile holds no kernel (a dry run "
            f"profiles nothing, and a failed shape records none). {record}")
    missing = sorted({m for source in profile.meta.sources for m in source.missing_metrics})
    which = (f" ({len(missing)} metrics missing, e.g. {', '.join(missing[:3])})" if missing
             else "")
    raise MissingMetricError(
        f"no kernel can be placed on the roofline: the report lacks the FLOP and DRAM "
        f"byte counters{which}. {record}")


def plot_roofline(profile: Profile, path: PathArg | None = None,
                  shape: str | None = None) -> Figure:
    """Draw the roofline of a profile's kernels, colored by top-level module.

    x is intensity (FLOP per DRAM byte), y achieved FLOP/s, both logarithmic. The memory
    roof is ``peak_bytes_per_s x intensity``; each precision present among the kernels gets
    a compute roof at its highest ``peak_flops_per_s`` in the report. Markers: area by
    kernel time, color by top-level module (:func:`top_level_module`; the same color as
    in :func:`~torch_nsight.render.scaling.plot_scaling`; the blocks of a repeated
    structure share one, :func:`~torch_nsight.render.figure.repeated_blocks`), circle
    forward, triangle backward, square outside both. Kernels that :func:`placeable` rejects
    are drawn in a strip under the chart, by time, never dropped.

    Args:
        profile: the profile.
        path: save the figure here too (``.png`` or ``.svg``); None only returns it.
        shape: plot this shape's kernels; None plots every kernel of the profile.

    Returns:
        The figure: its first axes hold the chart (collections with gid
        ``kernel-points``, lines with gid ``memory-roof`` and
        ``compute-roof:<precision>[+<precision>...]``);
        a second axes, present when some kernels cannot be placed, holds them (gid
        ``unplaced-kernels``).

    Raises:
        ValueError: ``path`` has another suffix, ``shape`` is not in the profile, or the
            profile has no kernels.
        OSError: the file cannot be written.
    """
    target = check_figure_path(path)
    kernels = profile.kernels
    shapes = _shapes(kernels)
    kernels = _shape_kernels(kernels, shape, shapes)
    rows = kernels.assign(
        _group=block_groups(kernels["module_path"].map(top_level_module), kernels["kernel"]),
        _marker=kernels["direction"].map(_marker))
    shown = set(rows["_group"])
    colors = {name: color for name, color in
              extend_colors(module_colors(profile, 1), rows["_group"]).items()
              if name in shown}
    mask = placeable(rows)
    if not mask.any():
        raise_unplaceable(profile)
    placed, unplaced = rows[mask], rows[~mask]
    longest = float(rows["duration_ns"].max()) or 1.0

    figure = new_figure(11.5, 7.0 if len(unplaced) else 6.2)
    if len(unplaced):
        ax, strip = figure.subplots(2, 1, gridspec_kw={"height_ratios": [6, 1]})
    else:
        ax, strip = figure.subplots(1, 1), None
    bandwidth = float(pd.to_numeric(rows["peak_bytes_per_s"], errors="coerce").max())
    bandwidth = bandwidth if bandwidth > 0 else float("nan")  # zero: no DRAM roof to draw
    roofs = _draw_chart(ax, placed, bandwidth, colors, longest)
    title_shapes = shape if shape is not None else (", ".join(shapes) or "unlabelled")
    ax.set_title(f"Roofline: {_gpu(profile)}, shape {title_shapes}\n"
                 f"{len(placed)} of {counted(len(rows), 'kernel')} placed; roofs from the report's "
                 "peaks at the fastest clock seen", fontsize=11)
    if strip is not None:
        _draw_strip(strip, unplaced, colors, longest, float(rows["duration_ns"].sum()))
        logger.info("%d kernel(s) without FLOPs or bytes drawn in the strip under the "
                    "roofline", len(unplaced))
    _legends(figure, colors, _directions(rows["direction"]), roofs)
    save_figure(figure, target)
    return figure
