"""Tables that answer "which module is slow, and why": text for people, files for tools.

:func:`render_table` formats a :class:`~torch_nsight.Profile` with tabulate, in readable
units (µs, GFLOP, %); :func:`write_table` writes the same rows to a file chosen by suffix:
raw numbers with unit-named columns (``duration_ns``) for ``.csv``, ``.parquet`` and
``.json``, the rendered text for ``.txt`` and ``.md``.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Union

import pandas as pd
from tabulate import tabulate, tabulate_formats

from torch_nsight.render.units import (
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
    from torch_nsight.profile import Profile

logger = logging.getLogger(__name__)

TableKind = Literal["hotspots", "modules", "kernels"]
HotspotOrder = Literal["headroom", "time"]
PathArg = Union[str, "os.PathLike[str]"]

TABLES: tuple[str, ...] = ("hotspots", "modules", "kernels")
#: Table formats: every tabulate format, plus ``markdown`` (tabulate's ``pipe``).
FORMATS: tuple[str, ...] = ("plain", "github", "markdown",
                            *sorted(f for f in tabulate_formats
                                    if f not in ("plain", "github")))
#: Rows shown when ``n`` is None: the top 10 hotspots; every module and kernel.
DEFAULT_ROWS: dict[str, int | None] = {"hotspots": 10, "modules": None, "kernels": None}
SUFFIXES: tuple[str, ...] = (".csv", ".parquet", ".json", ".txt", ".md")
KERNEL_WIDTH = 44
_ALIASES = {"markdown": "pipe"}
_STATIC_KERNEL_COLUMNS = ("nvtx_stack", "nvtx_start_end", "nvtx_other")

# A column of a rendered table: header, how to format a row, alignment.
Column = tuple[str, Callable[[pd.Series], str], str]


def _check(what: Any, n: Any, by: Any, depth: Any) -> None:
    if what not in TABLES:
        raise ValueError(f"what must be one of {', '.join(TABLES)}; got {what!r}")
    if n is not None and (not isinstance(n, int) or isinstance(n, bool) or n < 1):
        raise ValueError(f"n must be None or a positive integer, got {n!r}")
    if by not in ("headroom", "time"):
        raise ValueError(f"by must be 'headroom' or 'time', got {by!r}")
    if depth is not None and (not isinstance(depth, int) or isinstance(depth, bool)
                              or depth < 0):
        raise ValueError(f"depth must be None or an integer >= 0, got {depth!r}")


def table_frame(profile: Profile, what: TableKind = "hotspots", *, n: int | None = None,
                by: HotspotOrder = "headroom", depth: int | None = None) -> pd.DataFrame:
    """Return the rows of a table as raw numbers (the analysis columns, units in names).

    Args:
        profile: the profile.
        what: ``hotspots`` (kernel sites ranked by ``by``), ``modules`` (the module tree,
            in call-tree order) or ``kernels`` (every launch, in launch order).
        n: how many rows; None: :data:`DEFAULT_ROWS` (top 10 hotspots, all the rest).
        by: hotspot order, ``headroom`` (recoverable time) or ``time``.
        depth: deepest module level kept in the ``modules`` table (root = 0).

    Returns:
        A DataFrame: :meth:`Profile.hotspots`, :meth:`Profile.modules`, or the kernel table
        without its NVTX tuple columns.

    Raises:
        ValueError: an argument is out of range.
    """
    _check(what, n, by, depth)
    rows = n if n is not None else DEFAULT_ROWS[what]
    if what == "hotspots":
        return profile.hotspots(n=rows if rows is not None else max(len(profile.kernels), 1),
                                by=by, level="kernel")
    if what == "modules":
        frame = profile.modules(depth)
    else:
        frame = profile.kernels.drop(columns=[c for c in _STATIC_KERNEL_COLUMNS
                                              if c in profile.kernels])
        frame = frame.assign(pct_of_total=_kernel_share(frame))
    return (frame if rows is None else frame.head(rows)).reset_index(drop=True)


def _kernel_share(kernels: pd.DataFrame) -> pd.Series:
    """Each launch's share (%) of the GPU time of its (variant, shape, report, run)."""
    keys = kernels.reindex(columns=["variant", "shape", "source", "run"]).astype(object)
    keys = keys.where(keys.notna(), "")
    totals = kernels["duration_ns"].groupby([keys[c] for c in keys.columns]).transform("sum")
    return 100.0 * kernels["duration_ns"] / totals


def _labels(kernels: pd.DataFrame) -> list[Column]:
    """Variant and shape columns, shown only where the profile has several."""
    columns: list[Column] = []
    if "variant" in kernels and kernels["variant"].nunique(dropna=False) > 1:
        columns.append(("variant", lambda r: _text(r["variant"]), "left"))
    if "shape" in kernels and kernels["shape"].nunique(dropna=False) > 1:
        columns.append(("shape", lambda r: _text(r["shape"]), "left"))
    return columns


def _text(value: Any) -> str:
    return MISSING if is_missing(value) and not isinstance(value, str) else str(value)


def _module(row: pd.Series) -> str:
    return _text(row.get("module"))


_VERDICT: list[Column] = [
    ("bound", lambda r: _text(r["bound"]), "left"),
    ("reason", lambda r: _text(r["reason"]), "left"),
    ("% of roof", lambda r: format_pct(r["pct_of_roof"]), "right"),
    ("headroom µs", lambda r: format_us(r["headroom_ns"]), "right"),
]
"""The roofline verdict that ends a kernel or hotspot row."""


def _row_head(frame: pd.DataFrame, kernels: pd.DataFrame) -> list[Column]:
    """The leading columns of a kernel or hotspot row: rank, labels, module, direction, op."""
    columns: list[Column] = [("#", lambda r: str(int(r.name) + 1), "right"),
                             *_labels(kernels),
                             ("module", _module, "left"),
                             ("dir", lambda r: _text(r["direction"]), "left")]
    if frame["op"].notna().any():
        columns.append(("op", lambda r: shorten(r["op"], 28), "left"))
    return columns


def _hotspot_columns(frame: pd.DataFrame, kernels: pd.DataFrame) -> list[Column]:
    columns = _row_head(frame, kernels)
    columns.append(("kernel", lambda r: shorten(r["kernel"], KERNEL_WIDTH), "left"))
    if (frame["launches"] > 1).any():
        columns.append(("launches", lambda r: format_count(r["launches"]), "right"))
    columns += [
        ("time µs", lambda r: format_us(r["duration_ns"]), "right"),
        ("share %", lambda r: format_pct(r["pct_of_total"]), "right"),
        *_VERDICT,
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


def _module_columns(frame: pd.DataFrame, kernels: pd.DataFrame) -> list[Column]:
    return [
        *_labels(kernels),
        ("dir", lambda r: _text(r["direction"]), "left"),
        ("module", lambda r: "· " * int(r["depth"]) + str(r["module"]), "left"),
        ("total µs", lambda r: format_us(r["inclusive_ns"]), "right"),
        ("self µs", lambda r: format_us(r["exclusive_ns"]), "right"),
        ("share %", lambda r: format_pct(r["pct_of_total"]), "right"),
        ("kernels", lambda r: format_count(r["kernels"]), "right"),
        ("bound", _module_bound, "left"),
        ("% of roof", _module_roof, "right"),
        ("headroom µs", lambda r: format_us(r["headroom_ns"]), "right"),
        ("GFLOP", lambda r: format_giga(r["flops"], 3), "right"),
        ("FLOP/B", lambda r: _intensity(r["flops"], r["dram_bytes"]), "right"),
    ]


def _kernel_columns(frame: pd.DataFrame, kernels: pd.DataFrame) -> list[Column]:
    columns = _row_head(frame, kernels)
    columns += [
        ("kernel", lambda r: shorten(r["kernel"], KERNEL_WIDTH), "left"),
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


_COLUMNS: dict[str, Callable[[pd.DataFrame, pd.DataFrame], list[Column]]] = {
    "hotspots": _hotspot_columns, "modules": _module_columns, "kernels": _kernel_columns,
}


def render_table(profile: Profile, what: TableKind = "hotspots", fmt: str = "plain",
                 n: int | None = None, *, by: HotspotOrder = "headroom",
                 depth: int | None = None) -> str:
    """Return a table of the profile as text, in readable units.

    Times are in µs per run, ``share %`` is the share of the (variant, shape)'s GPU time,
    ``% of roof`` the roofline ceiling's time over the actual time, and ``headroom µs`` the
    time recoverable at that ceiling (see docs/roofline.md). Kernel names longer than
    :data:`KERNEL_WIDTH` characters are cut (``…``); :func:`write_table` keeps them whole.

    Args:
        profile: the profile.
        what: ``hotspots``, ``modules`` or ``kernels`` (see :func:`table_frame`).
        fmt: a tabulate format (``plain``, ``github``, ``grid``...) or ``markdown``.
        n: how many rows; None: :data:`DEFAULT_ROWS`.
        by: hotspot order, ``headroom`` or ``time``.
        depth: deepest module level in the ``modules`` table.

    Returns:
        The table, without a trailing newline; a one-line note when it has no rows.

    Raises:
        ValueError: an argument is out of range or ``fmt`` is unknown.
    """
    if fmt not in FORMATS:
        raise ValueError(f"fmt must be one of {', '.join(FORMATS)}; got {fmt!r}")
    frame = table_frame(profile, what, n=n, by=by, depth=depth)
    if frame.empty:
        return f"(no {what} to show: the profile has no kernels)"
    columns = _COLUMNS[what](frame, profile.kernels)
    rows = [[cell(row) for _, cell, _ in columns] for _, row in frame.iterrows()]
    logger.debug("rendering %d %s rows as %s", len(rows), what, fmt)
    return tabulate(rows, headers=[header for header, _, _ in columns],
                    tablefmt=_ALIASES.get(fmt, fmt), disable_numparse=True,
                    colalign=[align for _, _, align in columns])


def write_table(profile: Profile, path: PathArg, what: TableKind = "hotspots",
                n: int | None = None, *, by: HotspotOrder = "headroom",
                depth: int | None = None) -> Path:
    """Write a table to a file whose suffix chooses the format.

    ``.csv``, ``.parquet`` and ``.json`` (a list of records) hold the raw numbers of
    :func:`table_frame`, every column and full kernel names; ``.txt`` holds the plain text
    of :func:`render_table` and ``.md`` its markdown. An existing file is replaced.

    Args:
        profile: the profile.
        path: the file to write.
        what: ``hotspots``, ``modules`` or ``kernels``.
        n: how many rows; None: :data:`DEFAULT_ROWS`.
        by: hotspot order, ``headroom`` or ``time``.
        depth: deepest module level in the ``modules`` table.

    Returns:
        The path written.

    Raises:
        ValueError: the suffix is not one of :data:`SUFFIXES`, or an argument is out of
            range.
        ImportError: ``.parquet`` without pyarrow installed.
        OSError: the file cannot be written.
    """
    target = Path(path)
    suffix = target.suffix.lower()
    if suffix not in SUFFIXES:
        raise ValueError(f"path must end in one of {', '.join(SUFFIXES)}; got {target.name!r}")
    if suffix in (".txt", ".md"):
        text = render_table(profile, what, "plain" if suffix == ".txt" else "markdown", n,
                            by=by, depth=depth)
        target.write_text(text + "\n", encoding="utf-8")
    else:
        frame = table_frame(profile, what, n=n, by=by, depth=depth)
        if suffix == ".csv":
            frame.to_csv(target, index=False)
        elif suffix == ".parquet":
            frame.to_parquet(target, index=False)
        else:
            frame.to_json(target, orient="records", indent=2, force_ascii=False)
    logger.info("wrote %s table to %s", what, target)
    return target
