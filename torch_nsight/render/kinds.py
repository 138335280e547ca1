"""The kinds of table, declared once: the renderers, the command line and the docs read them.

:data:`TABLE_KINDS` maps each kind (``hotspots``, ``modules``, ``kernel_names``, ``launches``,
``shapes``, ``ranks``, ``findings``) to a
:class:`TableSpec`: a one-line summary (the CLI's ``--table`` help), the rows shown by
default, how to select its rows from a profile and which columns show them. docs/cli.md
describes every kind (a test checks it). Importing this module does not import pandas, so
the command line can offer the choices without paying for it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Literal

from torch_nsight.render.columns import (
    ColumnsBuilder,
    hotspot_columns,
    kernel_columns,
    kernel_group_columns,
    module_columns,
    rank_columns,
    shape_columns,
)
from torch_nsight.render.findings import finding_columns

if TYPE_CHECKING:
    import pandas as pd

    from torch_nsight.analyze.hotspots import HotspotOrder
    from torch_nsight.profile import Profile

__all__ = ["TableKind", "TableSpec", "TABLE_KINDS", "TABLES", "DEFAULT_ROWS",
           "HOTSPOT_ORDERS", "GROUPINGS"]

TableKind = Literal["hotspots", "modules", "kernel_names", "launches", "shapes", "ranks",
                    "findings"]
#: The values of :data:`torch_nsight.analyze.hotspots.HotspotOrder` (a test keeps them
#: equal), here so that the command line need not import pandas to offer them.
HOTSPOT_ORDERS: tuple[str, ...] = ("headroom", "time")
#: Selects a table's rows: (profile, rows or None for all, hotspot order, module depth,
#: whether repeated blocks fold into one row).
RowsSelector = Callable[["Profile", "int | None", "HotspotOrder", "int | None", bool],
                        "pd.DataFrame"]
#: The kernel table's columns of range tuples, left out of the ``launches`` table.
RANGE_TUPLE_COLUMNS = ("range_stack", "range_start_end", "range_other")


@dataclass(frozen=True)
class TableSpec:
    """One kind of table: what its rows are and how they are shown.

    Attributes:
        name: the kind, as passed to ``what`` and ``--table``.
        summary: one line saying what a row is, for ``--help``.
        default_rows: rows shown when ``n`` is None; None shows them all.
        rows: selects the rows as raw numbers (see
            :func:`torch_nsight.render.table_output.table_frame`).
        columns: the columns of the rendered text (see :mod:`torch_nsight.render.columns`).
    """

    name: str
    summary: str
    default_rows: int | None
    rows: RowsSelector
    columns: ColumnsBuilder


def _head(frame: pd.DataFrame, rows: int | None) -> pd.DataFrame:
    return (frame if rows is None else frame.head(rows)).reset_index(drop=True)


def _hotspot_rows(profile: Profile, rows: int | None, order: HotspotOrder,
                  depth: int | None, fold: bool = True) -> pd.DataFrame:
    import torch_nsight.render.hotspot_words  # noqa: F401 - the words
    return profile.hotspot_table(n=rows if rows is not None else max(len(profile.kernels), 1),
                                 order=order, level="kernel", fold=fold)


def _module_rows(profile: Profile, rows: int | None, order: HotspotOrder,
                 depth: int | None, fold: bool = True) -> pd.DataFrame:
    return _head(profile.module_table(depth, fold=fold), rows)


def _kernel_group_rows(profile: Profile, rows: int | None, order: HotspotOrder,
                       depth: int | None, fold: bool = True) -> pd.DataFrame:
    frame = profile.by_kernel()
    if rows is None:
        return frame.reset_index(drop=True)
    labels = frame[["variant", "shape"]].astype(object).fillna("")
    return frame.groupby([labels["variant"], labels["shape"]], sort=False).head(rows) \
        .reset_index(drop=True)


def _shape_rows(profile: Profile, rows: int | None, order: HotspotOrder,
                depth: int | None, fold: bool = True) -> pd.DataFrame:
    return _head(profile.by_shape(), rows)


def _rank_rows(profile: Profile, rows: int | None, order: HotspotOrder,
               depth: int | None, fold: bool = True) -> pd.DataFrame:
    return _head(profile.by_rank(), rows)


def _finding_rows(profile: Profile, rows: int | None, order: HotspotOrder,
                  depth: int | None, fold: bool = True) -> pd.DataFrame:
    import torch_nsight.render.finding_words  # noqa: F401 - the words
    return _head(profile.finding_table(fold=fold), rows)


def _launch_rows(profile: Profile, rows: int | None, order: HotspotOrder,
                 depth: int | None, fold: bool = True) -> pd.DataFrame:
    from torch_nsight.render.hotspot_words import word_kernels

    def worded() -> pd.DataFrame:  # once per profile: every launch's words
        frame = word_kernels(profile.kernels.drop(columns=[c for c in RANGE_TUPLE_COLUMNS
                                                           if c in profile.kernels]))
        return frame.assign(pct_of_total=_kernel_share(frame))

    return _head(profile.computed_once(("launch_rows",), worded), rows)


def _kernel_share(kernels: pd.DataFrame) -> pd.Series:
    """Each launch's share (%) of the GPU time of its (variant, shape, report, run)."""
    keys = kernels.reindex(columns=["variant", "shape", "source", "run"])
    totals = kernels["duration_ns"].groupby([keys[c] for c in keys.columns],
                                            dropna=False).transform("sum")
    return 100.0 * kernels["duration_ns"] / totals


#: Every kind of table, by name, in the order the command line lists them.
TABLE_KINDS: Mapping[str, TableSpec] = MappingProxyType({spec.name: spec for spec in (
    TableSpec("hotspots", "the top kernel sites, ranked by --sort (default: the top 10)", 10,
              _hotspot_rows, hotspot_columns),
    TableSpec("modules", "the module tree per direction, parents first (--depth folds it)",
              None, _module_rows, module_columns),
    TableSpec("kernel_names", "one row per kernel name across the modules that launch it, most "
              "time first (--top N per shape)", None, _kernel_group_rows, kernel_group_columns),
    TableSpec("launches", "every kernel launch, in launch order", None,
              _launch_rows, kernel_columns),
    TableSpec("shapes", "one row per shape: time, kernels, coverage, top module, bound mix",
              None, _shape_rows, shape_columns),
    TableSpec("ranks", "one row per distributed rank (report-rank<R> files): time, NCCL "
              "share, top module", None, _rank_rows, rank_columns),
    TableSpec("findings", "what to change: one row per finding, with its fix and the time it "
              "recovers, largest first (default: the top 10)", 10, _finding_rows,
              finding_columns),
)})
#: ``--by`` on the command line: the singular name of each kind of table.
GROUPINGS: Mapping[str, str] = MappingProxyType({
    "hotspot": "hotspots", "module": "modules", "kernel_name": "kernel_names",
    "launch": "launches", "shape": "shapes", "rank": "ranks", "finding": "findings"})
#: The names of :data:`TABLE_KINDS`, in order.
TABLES: tuple[str, ...] = tuple(TABLE_KINDS)
#: Rows shown when ``n`` is None, per kind: the top 10 hotspots and findings; all the
#: rows of the others.
DEFAULT_ROWS: Mapping[str, int | None] = MappingProxyType(
    {name: spec.default_rows for name, spec in TABLE_KINDS.items()})
