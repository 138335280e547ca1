"""How each module's time grows with the input shape, one line per module and variant."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Literal

import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from torch_nsight.analyze.rollup import module_paths, path_keys
from torch_nsight.analyze.spread import RUNS_COLUMN, run_times, spread, sum_runs
from torch_nsight.render.figure import (
    PathArg,
    block_groups,
    check_figure_path,
    extend_colors,
    label_modules,
    module_colors,
    new_figure,
    save_figure,
)

if TYPE_CHECKING:
    from torch_nsight.profile import Profile

logger = logging.getLogger(__name__)

VARIANT_STYLES: tuple[Literal["-", "--", ":", "-."], ...] = ("-", "--", ":", "-.")
MARKERS: tuple[str, ...] = ("o", "s", "^", "D")
NO_LABEL = "(unlabelled)"


def _label(value: Any) -> str:
    return value if isinstance(value, str) else NO_LABEL


def scaling_frame(profile: Profile, depth: int = 1) -> pd.DataFrame:
    """Return GPU time per run per (variant, shape, module), forward and backward summed.

    Modules deeper than ``depth`` fold into their ancestor at that level. A module above
    that level with kernels of its own (the root's residual adds, say) gets its own row,
    named ``<module> (own kernels)``, so the rows of a (variant, shape) add up to its total.

    Args:
        profile: the profile.
        depth: module level plotted (root = 0).

    Returns:
        Columns ``variant``, ``shape`` (``(unlabelled)`` where None), ``module``, ``time_ns``
        and ``ci95_ns`` (the half-width of the 95% interval of the time over the runs, NaN
        with one run), in order of shape and first launch.

    Raises:
        ValueError: ``depth`` is not an integer >= 0.
    """
    if not isinstance(depth, int) or isinstance(depth, bool) or depth < 0:
        raise ValueError(f"depth must be an integer >= 0, got {depth!r}")
    tree = profile.module_table(depth)
    if tree.empty:
        return pd.DataFrame(columns=["variant", "shape", "module", "time_ns", "ci95_ns"])
    tree = tree[tree["exclusive_ns"] > 0].copy()
    tree["module"] = label_modules(tree)
    names = dict(zip(tree["module_path"], tree["module"], strict=True))
    tree["variant"] = tree["variant"].map(_label)
    tree["shape"] = tree["shape"].map(_label)
    out = (tree.groupby(["variant", "shape", "module"], sort=False)["exclusive_ns"].sum()
           .rename("time_ns").reset_index())
    # each plotted module's own time in each run, both directions: its interval
    kernels = profile.kernels
    keys = ["variant", "shape", "module_path"]
    runs = run_times(kernels, keys, group_keys=path_keys(kernels, keys, depth)).reset_index()
    runs["module"] = runs["module_path"].map(names)
    runs["variant"] = runs["variant"].map(lambda v: _label(v or None))
    runs["shape"] = runs["shape"].map(lambda v: _label(v or None))
    groups = runs.dropna(subset=["module"]).groupby(["variant", "shape", "module"], sort=False)
    # (arrays summed by hand: newer pandas refuses an aggregation that returns an array)
    pairs = [(key, sum_runs(group[RUNS_COLUMN])) for key, group in groups]
    summed = pd.Series([a for _, a in pairs], dtype=object, index=pd.MultiIndex.from_tuples(
        [k for k, _ in pairs], names=["variant", "shape", "module"]))
    noise = spread(summed)["ci95_ns"].rename("ci95_ns").reset_index()
    return out.merge(noise, on=["variant", "shape", "module"], how="left")


def _module_groups(profile: Profile, depth: int) -> tuple[dict[str, str], dict[str, str]]:
    """Each plotted module's group (the blocks of a repeated structure under one label,
    :func:`~torch_nsight.render.figure.block_groups`, as in the roofline) and each group's
    color (the roofline's at depth 1)."""
    tree = profile.module_table(depth)
    tree = tree[tree["exclusive_ns"] > 0]
    names = dict(zip(tree["module_path"], label_modules(tree), strict=True))
    kernels = profile.kernels
    labels = module_paths(kernels, depth).map(names)
    groups = block_groups(labels, kernels["kernel"])
    known = labels.notna()
    colors = extend_colors(module_colors(profile, depth), groups[known])
    return dict(zip(labels[known], groups[known], strict=True)), colors


def _gpu(profile: Profile) -> str:
    gpus = ", ".join(map(str, profile.gpus))
    return f": {gpus}" if gpus else ""


def _draw_lines(ax: Axes, frame: pd.DataFrame, shapes: list[str], variants: list[str],
                colors: dict[str, str]) -> None:
    """One line per (module, variant) across the shapes; a missing shape leaves a gap."""
    several = len(variants) > 1
    for (variant, module), part in frame.groupby(["variant", "module"], sort=False):
        index = variants.index(variant)
        times = part.set_index("shape")["time_ns"].reindex(shapes)
        (line,) = ax.plot(range(len(shapes)), times.to_numpy(float) / 1e3,
                          color=colors[module], linestyle=VARIANT_STYLES[index % 4],
                          marker=MARKERS[index % 4], markersize=6, linewidth=1.8,
                          label=f"{module} [{variant}]" if several else module)
        line.set_gid("module-time")
        errors = part.set_index("shape")["ci95_ns"].reindex(shapes).to_numpy(float) / 1e3
        if (errors > 0).any():  # several runs: the 95% interval of each point
            bars = ax.errorbar(range(len(shapes)), times.to_numpy(float) / 1e3, yerr=errors,
                               fmt="none", ecolor=colors[module], capsize=3, linewidth=1)
            for artist in bars.get_children():  # a container holds no gid: its artists do
                artist.set_gid("module-time-ci95")
    ax.set_xticks(range(len(shapes)), shapes, rotation=30 if len(shapes) > 6 else 0)
    ax.set_xlim(-0.3, len(shapes) - 0.7)
    ax.set_ylim(bottom=0)
    ax.set_xlabel("shape")
    ax.set_ylabel("GPU time per run (µs), forward + backward")
    ax.grid(alpha=0.3)


def _draw_bars(ax: Axes, frame: pd.DataFrame, variants: list[str],
               colors: dict[str, str]) -> None:
    """One shape only: a horizontal bar per (module, variant), longest on top, with values."""
    modules = list(colors)
    height = 0.8 / len(variants)
    hatches = ("", "//", "..", "xx")
    for index, variant in enumerate(variants):
        mine = frame[frame["variant"] == variant].set_index("module")
        times, errors = mine["time_ns"], mine["ci95_ns"]
        for row, module in enumerate(modules):
            if module not in times:
                continue
            value = float(times[module]) / 1e3
            y = row + (index - (len(variants) - 1) / 2) * height
            label = f"{module} [{variant}]" if len(variants) > 1 else module
            error = float(errors.get(module, float("nan"))) / 1e3
            (bar,) = ax.barh(y, value, height=height * 0.9, color=colors[module],
                             hatch=hatches[index % 4], edgecolor="black", linewidth=0.5,
                             label=label, xerr=error if error > 0 else None, capsize=3)
            bar.set_gid("module-time")
            ax.annotate(f"{value:,.1f}" + (f" ±{error:,.1f}" if error > 0 else "") + " µs"
                        + (f" [{variant}]" if len(variants) > 1 else ""),
                        (value, y), xytext=(4, 0), textcoords="offset points",
                        va="center", fontsize=8)
    ax.set_yticks(range(len(modules)), modules)
    ax.invert_yaxis()
    ax.set_xlim(0, frame["time_ns"].max() / 1e3 * 1.18)
    ax.set_xlabel("GPU time per run (µs), forward + backward")
    ax.grid(axis="x", alpha=0.3)


def plot_scaling(profile: Profile, path: PathArg | None = None, depth: int = 1) -> Figure:
    """Plot each module's GPU time (forward + backward, per run) against the shape.

    Shapes sit on the x axis in the order they appear in the profile; each module is a
    color (:func:`~torch_nsight.render.figure.module_colors`: the roofline's color at
    depth 1), each variant a line style and marker (with a legend of its own when there are
    several). The blocks of a repeated structure (names differing by an index, the same
    kernels: :func:`~torch_nsight.render.figure.repeated_blocks`) share one color and one
    legend entry with their count, as in the roofline; their lines sit on one another. The
    module legend lists modules longest first at the last shape. A profile of
    one shape has no x axis to speak of: it gets horizontal bars instead, one per module
    (and variant), labelled with their time; its legend only tells variants apart (the
    y axis names the modules).

    Args:
        profile: the profile.
        path: save the figure here too (``.png`` or ``.svg``); None only returns it.
        depth: module level plotted (root = 0, 1 = the root's children); see
            :func:`scaling_frame`.

    Returns:
        The figure; each line (or, for one shape, each bar) has gid ``module-time`` and
        label ``<module>`` or ``<module> [<variant>]``.

    Raises:
        ValueError: ``path`` has another suffix, ``depth`` is invalid, or the profile has no
            kernels.
        OSError: the file cannot be written.
    """
    target = check_figure_path(path)
    frame = scaling_frame(profile, depth)
    if frame.empty:
        raise ValueError("the profile has no kernels to plot")
    shapes = list(dict.fromkeys(profile.kernels["shape"].map(_label)))
    variants = list(dict.fromkeys(frame["variant"]))
    # Legend order = the order of the lines at the last shape, longest first.
    last = frame[frame["shape"] == shapes[-1]].groupby("module", sort=False)["time_ns"].max()
    order = sorted(dict.fromkeys(frame["module"]), key=lambda m: -last.get(m, 0.0))
    groups, shared = _module_groups(profile, depth)
    groups = {module: groups.get(module, module) for module in order}
    shared = extend_colors(shared, groups.values())
    colors = {module: shared[groups[module]] for module in order}

    figure = new_figure(10.5, 5.8)
    ax = figure.subplots()
    if len(shapes) == 1:
        _draw_bars(ax, frame, variants, colors)
        logger.info("the profile holds one shape (%s): the scaling plot shows bars; profile "
                    "more shapes to see how modules scale", shapes[0])
        ax.set_title(f"Time per module (depth {depth}), shape {shapes[0]}{_gpu(profile)}\n"
                     "one shape only: profile more shapes to see scaling", fontsize=11)
    else:
        _draw_lines(ax, frame, shapes, variants, colors)
        ax.set_title(f"Time per module (depth {depth}) vs shape{_gpu(profile)}", fontsize=11)
    if len(shapes) > 1:  # one shape: the bars' own labels name the modules
        module_handles = [Line2D([], [], color=shared[group], linewidth=3, label=group)
                          for group in dict.fromkeys(groups.values())]
        figure.legend(handles=module_handles, loc="outside right upper", title="module",
                      fontsize=9, title_fontsize=9)
    elif len(variants) > 1:  # what tells the bars of one module apart: their hatch
        hatches = ("", "//", "..", "xx")
        figure.legend(handles=[Patch(facecolor="white", edgecolor="black",
                                     hatch=hatches[i % 4], label=variant)
                               for i, variant in enumerate(variants)],
                      loc="outside right upper", title="variant", fontsize=9, title_fontsize=9)
    if len(variants) > 1 and len(shapes) > 1:
        style_handles = [Line2D([], [], color="black", linestyle=VARIANT_STYLES[i % 4],
                                marker=MARKERS[i % 4], label=variant)
                         for i, variant in enumerate(variants)]
        figure.legend(handles=style_handles, loc="outside right lower", title="variant",
                      fontsize=9, title_fontsize=9)
    logger.debug("scaling plot: %d modules x %d variants over %d shapes", len(colors),
                  len(variants), len(shapes))
    save_figure(figure, target)
    return figure


