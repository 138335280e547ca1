"""Figures drawn without pyplot: no display, no global state, Agg for PNG; module colors.

Each plot builds a :class:`matplotlib.figure.Figure` with an Agg canvas (so it never needs
a display and leaves pyplot's figure list alone) and saves it by the path's suffix. Every
chart of a profile colors its modules through :func:`module_colors`, so one module has one
color in the roofline and in the scaling chart, and draws the blocks of a repeated
structure under one label (:func:`repeated_blocks`), one color and one legend entry for all.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Union

import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.text import Text
from matplotlib.ticker import Formatter

from torch_nsight.analyze.fold import folded_name, index_template
from torch_nsight.files import atomic_output
from torch_nsight.render.readable_numbers import printable
from torch_nsight.vocabulary import UNATTRIBUTED, path_parent

if TYPE_CHECKING:
    from torch_nsight.profile import Profile

logger = logging.getLogger(__name__)

PathArg = Union[str, "os.PathLike[str]"]
FIGURE_SUFFIXES: tuple[str, ...] = (".png", ".svg")
UNATTRIBUTED_COLOR = "#9e9e9e"
#: Module colors in order of assignment (tab10, then tab20's lighter half).
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
    _escape_names(figure)
    with atomic_output(target) as temp:
        figure.savefig(temp, format=target.suffix.lower().lstrip("."), bbox_inches="tight")
    logger.info("wrote %s", target)


class _Escaped(Formatter):
    """A tick formatter whose labels come out of ``inner`` with control characters
    escaped: tick labels are made only when the figure is drawn."""

    def __init__(self, inner: Formatter) -> None:
        self.inner = inner

    def __call__(self, x: float, pos: int | None = None) -> str:
        return printable(str(self.inner(x, pos)))

    def format_ticks(self, values: Any) -> list[str]:
        return [printable(str(label)) for label in self.inner.format_ticks(values)]

    def set_locs(self, locs: Any) -> None:
        self.inner.set_locs(locs)

    def get_offset(self) -> str:
        return printable(str(self.inner.get_offset()))


def _printable_lines(text: str) -> str:
    """``text`` with control characters escaped line by line: a title's own line breaks
    stay line breaks (the plotters build titles of several lines)."""
    return "\n".join(printable(line) for line in text.split("\n"))


def _escape_names(figure: Figure) -> None:
    """Every name from a file that the figure draws or writes, control characters escaped:
    its texts, the tick labels its axes make only when drawn (shapes, modules), and the ids
    an SVG writes (``compute-roof:<precision>``)."""
    # the titles the plotters build (matplotlib keeps the left and right ones, and the
    # figure's, in attributes of its own)
    titles = {id(getattr(owner, name, None)) for owner in (figure, *figure.axes)
              for name in ("title", "_left_title", "_right_title", "_suptitle")}
    for text in figure.findobj(Text):  # a name's own line break is escaped, a title's kept
        escape = _printable_lines if id(text) in titles else printable
        text.set_text(escape(text.get_text()))
    for ax in figure.axes:
        for axis in (ax.xaxis, ax.yaxis):
            for formatter, put in ((axis.get_major_formatter(), axis.set_major_formatter),
                                   (axis.get_minor_formatter(), axis.set_minor_formatter)):
                if not isinstance(formatter, _Escaped):
                    put(_Escaped(formatter))
    for artist in figure.findobj():
        gid = artist.get_gid()
        if isinstance(gid, str):
            artist.set_gid(printable(gid))


def own_kernels(module: str) -> str:
    """Return the label of the kernels a module launches itself, outside its children.

    Args:
        module: the module's name.

    Returns:
        ``<module> (own kernels)``.
    """
    return f"{module} (own kernels)"


def label_modules(tree: pd.DataFrame) -> list[str]:
    """Return the label each row of a module tree is drawn under.

    A module whose children are also rows (its kernels outside them: the root's residual
    adds, say) is labelled :func:`own_kernels`; any other module by its name.

    Args:
        tree: rows of :func:`torch_nsight.analyze.module_tree` (``module``, ``module_path``).

    Returns:
        One label per row, in order.
    """
    parents = {path_parent(path) for path in tree["module_path"]}
    return [own_kernels(module) if path in parents else module
            for module, path in zip(tree["module"], tree["module_path"], strict=True)]


def module_colors(profile: Profile, depth: int = 1) -> dict[str, str]:
    """Return one color per module label, the same in every chart of ``profile``.

    Labels are those of :func:`label_modules` at levels 1 to ``depth`` (level 0 for
    ``depth=0``), each level in call-tree order over the whole profile (every shape and
    variant), so that a module keeps its color whichever chart, shape or depth shows it.
    ``(unattributed)`` is always grey.

    Args:
        profile: the profile.
        depth: the deepest module level charted (the roofline charts level 1).

    Returns:
        label -> color, in order of assignment; use :func:`extend_colors` for labels that
        are missing (a root without children, say).
    """
    names: list[str] = []
    for level in range(1, depth + 1) if depth >= 1 else (0,):
        tree = profile.module_table(level)
        names += label_modules(tree[tree["exclusive_ns"] > 0])
    return extend_colors({}, names)


def extend_colors(colors: dict[str, str], names: Iterable[str]) -> dict[str, str]:
    """Give each name not in ``colors`` the palette's next color; ``(unattributed)`` grey.

    Args:
        colors: colors assigned so far (not modified).
        names: the names, in order of first appearance.

    Returns:
        A new dict: ``colors`` then the new names; names past the palette reuse it.
    """
    out = dict(colors)
    index = sum(1 for color in out.values() if color != UNATTRIBUTED_COLOR)
    for name in names:
        if name in out:
            continue
        if name.startswith(UNATTRIBUTED):
            out[name] = UNATTRIBUTED_COLOR
        else:
            out[name] = PALETTE[index % len(PALETTE)]
            index += 1
    return out


def repeated_blocks(labels: pd.Series, kernels: pd.Series) -> dict[str, str]:
    """The labels that are blocks of one repeated structure: names that differ only by an
    index and whose kernels are the same (as many of each), each mapped to one label for
    all of them: ``{0-3} ×4``, ``layers.{0-11} ×12``, ``{1-3}.self_attn ×3``. Their points
    and lines sit on one another; one color and one legend entry with the count say so.

    Args:
        labels: the label each kernel is drawn under (a top-level module, a module at the
            charted depth), one per kernel launch.
        kernels: the kernel's name of each launch, on the same index.

    Returns:
        label -> the label of its structure, for the labels of a structure of two blocks
        or more only.
    """
    families: dict[tuple[str, tuple[str, ...]], list[tuple[str, tuple[int, ...]]]] = {}
    for name, part in kernels.groupby(labels, sort=False):
        template, indices = index_template(str(name))
        if indices:
            families.setdefault((template, tuple(sorted(part.astype(str)))), []).append(
                (str(name), indices))
    out: dict[str, str] = {}
    for (template, _), members in families.items():
        if len(members) > 1:
            label = f"{folded_name(template, [ix for _, ix in members])} ×{len(members)}"
            out.update(dict.fromkeys((name for name, _ in members), label))
    return out


def block_groups(labels: pd.Series, kernels: pd.Series) -> pd.Series:
    """``labels`` with the blocks of each repeated structure under its one label
    (:func:`repeated_blocks`); the colors of a chart extend :func:`module_colors` with
    them, in this order (:func:`extend_colors`)."""
    blocks = repeated_blocks(labels, kernels)
    return labels.map(lambda label: blocks.get(label, label))
