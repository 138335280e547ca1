"""Render stage: tables (tabulate) and plots (matplotlib) of a :class:`~torch_nsight.Profile`.

Renderers receive a Profile and nothing else. They log, never print; they write only the
file they are given. Plots are drawn on an Agg canvas, without pyplot, and saved as PNG or
SVG by suffix. Every name loads on first use: the table kinds
(:mod:`torch_nsight.render.kinds`) cost no pandas, and printing a table never loads
matplotlib.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from torch_nsight.naming import lazy_names

if TYPE_CHECKING:
    from torch_nsight.render.kinds import TABLE_KINDS, TABLES
    from torch_nsight.render.roofline_plot import plot_roofline
    from torch_nsight.render.scaling import plot_scaling
    from torch_nsight.render.table_output import FORMATS, render_table, table_frame, write_table
    from torch_nsight.render.timeline_layout import timeline_frame
    from torch_nsight.render.timeline_plot import plot_timeline

__all__ = ["render_table", "write_table", "table_frame", "plot_roofline", "plot_scaling",
           "plot_timeline", "timeline_frame", "FORMATS", "TABLES", "TABLE_KINDS"]

_LAZY = {"render_table": "table_output", "write_table": "table_output",
         "table_frame": "table_output", "FORMATS": "table_output", "TABLES": "kinds", "TABLE_KINDS": "kinds",
         "plot_roofline": "roofline_plot", "plot_scaling": "scaling",
         "plot_timeline": "timeline_plot", "timeline_frame": "timeline_layout"}


__getattr__ = lazy_names(__name__, _LAZY)


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
