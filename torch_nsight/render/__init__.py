"""Render stage: tables (tabulate) and plots (matplotlib) of a :class:`~torch_nsight.Profile`.

Renderers receive a Profile and nothing else. They log, never print; they write only the
file they are given. Plots are drawn on an Agg canvas, without pyplot, and saved as PNG or
SVG by suffix.
"""

from __future__ import annotations

from torch_nsight.render.roofline import plot_roofline
from torch_nsight.render.scaling import plot_scaling
from torch_nsight.render.table import FORMATS, TABLES, render_table, table_frame, write_table

__all__ = ["render_table", "write_table", "table_frame", "plot_roofline", "plot_scaling",
           "FORMATS", "TABLES"]
