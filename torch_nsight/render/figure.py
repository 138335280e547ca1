"""Figures drawn without pyplot: no display, no global state, Agg for PNG.

Each plot builds a :class:`matplotlib.figure.Figure` with an Agg canvas (so it never needs
a display and leaves pyplot's figure list alone) and saves it by the path's suffix.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Union

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

logger = logging.getLogger(__name__)

PathArg = Union[str, "os.PathLike[str]"]
FIGURE_SUFFIXES: tuple[str, ...] = (".png", ".svg")
UNATTRIBUTED_COLOR = "#9e9e9e"
#: Module colours in order of first appearance (tab10, then tab20's lighter half).
PALETTE: tuple[str, ...] = (
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#bcbd22",
    "#17becf", "#aec7e8", "#ffbb78", "#98df8a", "#ff9896", "#c5b0d5", "#c49c94", "#f7b6d2",
)


def new_figure(width: float, height: float) -> Figure:
    """Return an empty figure on an Agg canvas with constrained layout.

    Args:
        width: inches.
        height: inches.

    Returns:
        The figure.
    """
    figure = Figure(figsize=(width, height), dpi=110, layout="constrained")
    FigureCanvasAgg(figure)
    return figure


def check_figure_path(path: PathArg | None) -> Path | None:
    """Return ``path`` as a Path after checking its suffix (before any drawing).

    Args:
        path: where the figure will go, or None.

    Returns:
        The path, or None.

    Raises:
        ValueError: the suffix is not ``.png`` or ``.svg``.
    """
    if path is None:
        return None
    target = Path(path)
    if target.suffix.lower() not in FIGURE_SUFFIXES:
        raise ValueError(f"path must end in .png or .svg, got {target.name!r}")
    return target


def save_figure(figure: Figure, target: Path | None) -> None:
    """Save ``figure`` to ``target`` (PNG or SVG by suffix); do nothing for None.

    Args:
        figure: the figure.
        target: a path checked by :func:`check_figure_path`, or None.

    Raises:
        OSError: the file cannot be written.
    """
    if target is None:
        return
    figure.savefig(target, format=target.suffix.lower().lstrip("."), bbox_inches="tight")
    logger.info("wrote %s", target)


def module_colors(names: list[str]) -> dict[str, str]:
    """Return a colour per name, in order; ``(unattributed)`` is always grey.

    Args:
        names: the names in order of first appearance.

    Returns:
        name -> colour; names past the palette reuse it.
    """
    colors: dict[str, str] = {}
    index = 0
    for name in names:
        if name in colors:
            continue
        if name.startswith("(unattributed)"):
            colors[name] = UNATTRIBUTED_COLOR
        else:
            colors[name] = PALETTE[index % len(PALETTE)]
            index += 1
    return colors
