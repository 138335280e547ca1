"""The columns of each rendered table: header, how to format a row's cell, alignment.

Each ``*_columns(frame, kernels)`` function receives the rows about to be shown (from
:func:`torch_nsight.render.table_output.table_frame`) and the profile's kernel table, and returns
the columns to show: variant and shape appear only where the profile has several, ``op``
only where some row has one, ``launches`` only where a site launched more than once.
Importing this module does not import pandas.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from torch_nsight.render.readable_numbers import (
    MISSING,
    format_count,
    format_giga,
    format_number,
    format_pct,
    format_us,
    is_missing,
    shorten,
)

if TYPE_CHECKING:
    import pandas as pd

#: Kernel names longer than this many characters are cut (``…``) in text tables.
KERNEL_WIDTH = 44
#: Reasons and next steps are cut to these widths in text tables (files keep them whole).
REASON_WIDTH = 42

#: A column of a rendered table: header, how to format a row, alignment.
Column = tuple[str, Callable[["pd.Series"], str], str]
#: Builds the columns of one kind of table from its rows and the profile's kernel table.
ColumnsBuilder = Callable[["pd.DataFrame", "pd.DataFrame"], list[Column]]


#: Set while a table is rendered for a file or a pull request (markdown, HTML): cells are
#: never cut there; a terminal's table is fitted to its width instead (render/fit.py).
_WHOLE: contextvars.ContextVar[bool] = contextvars.ContextVar("torch_nsight_whole", default=False)


@contextlib.contextmanager
def whole_cells() -> Iterator[None]:
    """Render cells whole (no ``…``) inside the block."""
    token = _WHOLE.set(True)
    try:
        yield
    finally:
        _WHOLE.reset(token)


def cut(text: Any, width: int) -> str:
    """``text`` cut to ``width`` (:func:`shorten`), or whole inside :func:`whole_cells`."""
    return _text(text) if _WHOLE.get() else shorten(text, width)


def _text(value: Any) -> str:
    return MISSING if is_missing(value) and not isinstance(value, str) else str(value)


def _reason(row: pd.Series) -> str:
    """The reason cut to :data:`REASON_WIDTH`, after its last ``; `` clause that fits."""
    text = row["reason"]
    if not isinstance(text, str) or len(text) <= REASON_WIDTH or _WHOLE.get():
        return _text(text)
    end = text.rfind("; ", 0, REASON_WIDTH + 1)
    return text[:end] + "…" if end > 0 else shorten(text, REASON_WIDTH)


def _labels(kernels: pd.DataFrame) -> list[Column]:
    """Variant and shape columns, shown only where the profile has several."""
    columns: list[Column] = []
    if "variant" in kernels and kernels["variant"].nunique(dropna=False) > 1:
        columns.append(("variant", lambda r: _text(r["variant"]), "left"))
    if "shape" in kernels and kernels["shape"].nunique(dropna=False) > 1:
        columns.append(("shape", lambda r: _text(r["shape"]), "left"))
    return columns


_VERDICT: list[Column] = [
    ("bound", lambda r: _text(r["bound"]), "left"),
    ("reason", _reason, "left"),
    ("% of roof", lambda r: format_pct(r["pct_of_roof"]), "right"),
    ("headroom µs", lambda r: format_us(r["headroom_ns"]), "right"),
]
"""The roofline verdict that ends a kernel or hotspot row."""


def timed(column: str) -> Callable[[pd.Series], str]:
    """A time cell in µs, with `` ±`` its 95% interval where the row's label has several
    runs (:mod:`torch_nsight.analyze.spread`)."""
    def cell(row: pd.Series) -> str:
        text = format_us(row[column])
        runs, half = row.get("runs"), row.get("ci95_ns")
        if not is_missing(runs) and int(runs) > 1 and not is_missing(half):
            text += f" ±{format_us(half)}"
        return text
    return cell


#: The most levels a module row is indented by, a ``· `` each: a deeper row shows its depth
#: in their place (a tree 10,000 deep would otherwise print 100 million characters).
INDENT_LEVELS = 16


def depth_indent(depth: Any) -> str:
    """The indent of a module row ``depth`` levels deep (0 where unknown)."""
    levels = 0 if is_missing(depth) else int(depth)
    if levels <= INDENT_LEVELS:
        return "· " * levels
    return "· " * (INDENT_LEVELS - 4) + f"(depth {levels}) "


def module_cell(row: pd.Series) -> str:
    """The module of a row, with ``×N`` when it stands for N folded blocks."""
    blocks = row.get("blocks")
    folded = not is_missing(blocks) and int(blocks) > 1
    return _text(row.get("module")) + (f" ×{int(blocks)}" if folded else "")


def _row_head(frame: pd.DataFrame, kernels: pd.DataFrame) -> list[Column]:
    """The leading columns of a kernel or hotspot row: rank, labels, module, direction, op."""
    columns: list[Column] = [("#", lambda r: str(int(r.name) + 1), "right"),
                             *_labels(kernels),
                             ("module", module_cell, "left"),
                             ("dir", lambda r: _text(r["direction"]), "left")]
    named = frame["op"].notna() | (frame["aten_ops"].notna() if "aten_ops" in frame else False)
    if named.any():  # the functional op range (ops=True), else the calls table's aten ops
        columns.append(("op", lambda r: cut(_op_text(r), 28), "left"))
    return columns


def _op_text(row: pd.Series) -> str:
    if isinstance(row.get("op"), str):
        return row["op"]
    return row["aten_ops"] if isinstance(row.get("aten_ops"), str) else MISSING


FUSED_WIDTH = 30


def fused_text(module: Any, fused: Any) -> str:
    """The modules a fused kernel computed for, relative to its own module
    (``blocks`` + ``(blocks.3.mlp.fc2, blocks.4.norm1)`` -> ``3.mlp.fc2, 4.norm1``)."""
    if not isinstance(fused, (tuple, list)) or not fused:
        return ""
    prefix = f"{module}." if isinstance(module, str) else ""
    return ", ".join(m[len(prefix):] if m.startswith(prefix) else m for m in fused)


def hotspot_columns(frame: pd.DataFrame, kernels: pd.DataFrame) -> list[Column]:
    """Columns of the ``hotspots`` table: a ranked kernel site, its roofline verdict and the
    next step to try (reason and next step cut in text; files keep them whole).

    A :data:`ColumnsBuilder` over :meth:`Profile.hotspots` output rows.
    """
    columns = _row_head(frame, kernels)
    columns.append(("kernel", lambda r: cut(r["kernel"], KERNEL_WIDTH), "left"))
    if "fused_modules" in frame and frame["fused_modules"].notna().any():
        columns.append(("fused", lambda r: cut(fused_text(r["module"], r["fused_modules"]),
                                                   FUSED_WIDTH), "left"))
    if (frame["launches"] > 1).any():
        columns.append(("launches", lambda r: format_count(r["launches"]), "right"))
    columns += [
        ("time µs", timed("duration_ns"), "right"),
        ("share %", lambda r: format_pct(r["pct_of_total"]), "right"),
        *_VERDICT,
        ("next step", lambda r: _text(r["next_step"]), "left"),  # wraps to fit, whole
    ]
    return columns


def _module_roof(row: pd.Series) -> str:
    """Time-weighted % of roof of a module: its time less its headroom, over its time."""
    if is_missing(row["headroom_ns"]) or not row["inclusive_ns"]:
        return MISSING
    return format_pct(100.0 * (1.0 - row["headroom_ns"] / row["inclusive_ns"]))


def _module_bound(row: pd.Series) -> str:
    if is_missing(row["bound"]) and not isinstance(row["bound"], str):
        return MISSING
    return f"{row['bound']} ({100.0 * row['bound_share']:.0f}% of time)"


def _intensity(flops: Any, dram_bytes: Any) -> str:
    if is_missing(flops) or is_missing(dram_bytes) or not dram_bytes:
        return MISSING
    return format_number(float(flops) / float(dram_bytes), 1)


def module_columns(frame: pd.DataFrame, kernels: pd.DataFrame) -> list[Column]:
    """Columns of the ``modules`` table: the module tree with times, verdict and work.

    A :data:`ColumnsBuilder` over :meth:`Profile.modules` output rows.
    """
    return [
        *_labels(kernels),
        ("dir", lambda r: _text(r["direction"]), "left"),
        ("module", lambda r: depth_indent(r["depth"]) + module_cell(r), "left"),
        ("total µs", timed("inclusive_ns"), "right"),
        ("self µs", lambda r: format_us(r["exclusive_ns"]), "right"),
        ("share %", lambda r: format_pct(r["pct_of_total"]), "right"),
        ("kernels", lambda r: format_count(r["kernels"]), "right"),
        ("bound", _module_bound, "left"),
        ("% of roof", _module_roof, "right"),
        ("headroom µs", lambda r: format_us(r["headroom_ns"]), "right"),
        ("GFLOP", lambda r: format_giga(r["flops"], 3), "right"),
        ("FLOP/B", lambda r: _intensity(r["flops"], r["dram_bytes"]), "right"),
    ]


def kernel_columns(frame: pd.DataFrame, kernels: pd.DataFrame) -> list[Column]:
    """Columns of the ``launches`` table: every launch with its rates and verdict.

    A :data:`ColumnsBuilder` over launch rows (``Profile.kernels`` with ``pct_of_total``).
    """
    columns = _row_head(frame, kernels)
    columns += [
        ("kernel", lambda r: cut(r["kernel"], KERNEL_WIDTH), "left"),
        ("time µs", lambda r: format_us(r["duration_ns"]), "right"),
        ("share %", lambda r: format_pct(r["pct_of_total"]), "right"),
        ("GFLOP", lambda r: format_giga(r["flops"], 3), "right"),
        ("FLOP/B", lambda r: _intensity(r["flops"], r["dram_bytes"]), "right"),
        ("TFLOP/s", lambda r: format_number(r["achieved_flops_per_s"] / 1e12, 1)
         if not is_missing(r["achieved_flops_per_s"]) else MISSING, "right"),
        ("GB/s", lambda r: format_giga(r["achieved_bytes_per_s"], 0), "right"),
        ("precision", lambda r: _text(r["precision"]), "left"),
        *_VERDICT,
    ]
    return columns


def kernel_group_columns(frame: pd.DataFrame, kernels: pd.DataFrame) -> list[Column]:
    """Columns of the ``kernel_names`` table: one kernel name across the modules launching it.

    A :data:`ColumnsBuilder` over :meth:`Profile.by_kernel` output rows.
    """
    return [
        *_labels(kernels),
        ("kernel", lambda r: cut(r["kernel"], KERNEL_WIDTH), "left"),
        ("launches", lambda r: format_count(r["launches"]), "right"),
        ("time µs", timed("duration_ns"), "right"),
        ("mean µs", lambda r: format_us(r["mean_ns"]), "right"),
        ("share %", lambda r: format_pct(r["pct_of_total"]), "right"),
        ("modules", lambda r: format_count(r["modules"]), "right"),
        ("top module", lambda r: _text(r["top_module"]), "left"),
        ("bound", lambda r: _text(r["bound"]), "left"),
        ("headroom µs", lambda r: format_us(r["headroom_ns"]), "right"),
    ]


def _share(column: str) -> Callable[[pd.Series], str]:
    return lambda r: format_pct(r[column])


def shape_columns(frame: pd.DataFrame, kernels: pd.DataFrame) -> list[Column]:
    """Columns of the ``shapes`` table: one row per (variant, shape).

    A :data:`ColumnsBuilder` over :meth:`Profile.by_shape` output rows.
    """
    columns: list[Column] = []
    if frame["variant"].notna().any():
        columns.append(("variant", lambda r: _text(r["variant"]), "left"))
    return [
        *columns,
        ("shape", lambda r: _text(r["shape"]), "left"),
        ("kernels", lambda r: format_count(r["launches"]), "right"),
        ("time µs", timed("duration_ns"), "right"),
        ("in modules %", _share("coverage_pct"), "right"),
        ("top module", lambda r: _text(r["top_module"]), "left"),
        ("its %", _share("top_module_pct"), "right"),
        ("memory %", _share("memory_pct"), "right"),
        ("compute %", _share("compute_pct"), "right"),
        ("latency %", _share("latency_pct"), "right"),
        ("headroom µs", lambda r: format_us(r["headroom_ns"]), "right"),
    ]


def rank_columns(frame: pd.DataFrame, kernels: pd.DataFrame) -> list[Column]:
    """Columns of the ``ranks`` table: one row per distributed rank.

    A :data:`ColumnsBuilder` over :meth:`Profile.by_rank` output rows.
    """
    return [
        ("rank", lambda r: str(int(r["rank"])), "right"),
        *_labels(kernels),
        ("kernels", lambda r: format_count(r["launches"]), "right"),
        ("time µs", lambda r: format_us(r["duration_ns"]), "right"),
        ("NCCL µs", lambda r: format_us(r["nccl_ns"]), "right"),
        ("NCCL %", _share("nccl_pct"), "right"),
        ("top module", lambda r: _text(r["top_module"]), "left"),
        ("its %", _share("top_module_pct"), "right"),
    ]
