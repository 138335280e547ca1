"""Text tables that fit the terminal: columns dropped by priority, long text wrapped, never
cut where it is the point of the row (a finding's fix).

The width is ``$COLUMNS`` when set, else the terminal's, else 120 (a log, a pipe, CI).
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import sys
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

from torch_nsight.render.fit_names import (
    MAX_NAME_END,
    distinguishing_width,
    label_lines,
    name_lines,
)

__all__ = ["terminal_width", "fit_columns", "fit_table", "tabulated", "shared_cells", "wrap_text", "DEFAULT_WIDTH"]

DEFAULT_WIDTH = 120
#: Narrowest a wrapped column gets before names are cut, and at all.
SOFT_WRAP = 30
MIN_WRAP = 16
#: Narrowest of all, where a table with many columns (a grid's borders) still overflows.
LAST_RESORT = 8


def terminal_width() -> int:
    """Columns to fit: ``$COLUMNS``, else the terminal's width, else :data:`DEFAULT_WIDTH`."""
    value = os.environ.get("COLUMNS", "")
    if value.isdigit() and int(value) >= 40:
        return int(value)
    if sys.stdout.isatty():
        return shutil.get_terminal_size((DEFAULT_WIDTH, 24)).columns
    return DEFAULT_WIDTH


@functools.lru_cache(maxsize=1 << 16)
def _cell_width(text: str) -> int:
    """The display width of a cell's widest line, as tabulate measures it (wide characters,
    escape sequences)."""
    import tabulate

    width = getattr(tabulate, "_visible_width", len)
    return max((width(line) for line in text.split("\n")), default=0)


def wrap_text(text: str, width: int | None = None, indent: str = "  ") -> str:
    """A line of prose wrapped at spaces to ``width`` (default :func:`terminal_width`),
    each line after the first indented by ``indent``; a word is broken only where it is
    longer than a whole line (a metric's name at 80 columns). Line breaks in ``text`` stay.

    Args:
        text: the text.
        width: the characters a line may take.
        indent: what the continuation lines start with.

    Returns:
        The wrapped text, lines joined by ``\\n``.
    """
    import textwrap

    width = width or terminal_width()
    out: list[str] = []
    for line in text.split("\n"):
        lead = line[: len(line) - len(line.lstrip(" "))]
        # a word longer than a whole line (a metric's name) is broken: nothing else fits it
        out += textwrap.wrap(line, width, subsequent_indent=lead + indent,
                             break_long_words=True, break_on_hyphens=False) or [line]
    return "\n".join(out)


def _width(headers: Sequence[str], rows: Sequence[Sequence[str]], aligns: Sequence[str],
           tablefmt: str = "plain") -> int:
    """The width of the widest line of these columns as a tabulate table.

    A column is as wide as its widest cell, so the table of each column's widest cell is
    as wide as the whole table: one row to lay out, each cell measured once (a table of
    1,000 deep module rows is measured in milliseconds, not by laying it out 27 times).
    """

    widest = [max((str(r[at]) for r in rows), key=_cell_width, default="")
              for at in range(len(headers))]
    text = tabulated(list(headers), [widest] if rows else [], list(aligns), tablefmt)
    return max((len(line) for line in text.splitlines()), default=0)


def tabulated(headers: Sequence[str], rows: Sequence[Sequence[str]], aligns: Sequence[str],
              tablefmt: str = "plain") -> str:
    """The table as tabulate lays it out, cells as they are (no number parsing); a
    ``plain`` one with its headers as its first row, so that a column is as wide as its
    widest cell or header, not two more than its header (tabulate's padding of headers,
    which only a format with rules under its headers needs).

    Args:
        headers, rows, aligns: the table.
        tablefmt: a tabulate format.

    Returns:
        The text, without a trailing newline.
    """
    from tabulate import tabulate

    if tablefmt == "plain":
        return str(tabulate([list(headers), *rows], tablefmt="plain", disable_numparse=True,
                            colalign=list(aligns)))
    return str(tabulate(rows, headers=list(headers), tablefmt=tablefmt, disable_numparse=True,
                        colalign=list(aligns)))


def fit_columns(headers: list[str], rows: list[list[str]], aligns: list[str], width: int,
                *, drop: Sequence[str] = (), wrap: Sequence[str] = (),
                cut: Sequence[str] = (), keep_end: Sequence[str] = (),
                labels: Sequence[str] = (), tablefmt: str = "plain",
                prefer: dict[str, int] | None = None,
                drop_last: Sequence[str] = ()) -> tuple[list[str], list[list[str]], list[str]]:
    """Drop and wrap columns until a plain table of them fits ``width`` characters.

    Args:
        headers: the column headers.
        rows: the cells, as text.
        aligns: each column's alignment.
        width: the characters a line may take.
        drop: headers of columns that may go, the first to go first.
        wrap: headers of columns whose text may wrap onto several lines (once every
            droppable column went), the first to wrap first; wrapped text is kept whole,
            and gets narrower than :data:`SOFT_WRAP` before any name is cut.
        cut: headers of columns of names, narrowed last: a name wraps onto a second line
            at a ``.``, ``/``, ``_`` or space, and only one that does not fit two lines is
            cut: a name in ``keep_end`` loses its middle and keeps its start and its
            distinguishing end, whole dotted parts (``model.…post_attention_layernorm ×8``),
            the others their end.
        keep_end: see ``cut``.
        labels: headers of columns of labels (a shape, a variant) that go on two lines
            (``2x512x`` over ``256``), never cut, where a name of ``keep_end`` would
            otherwise lose its distinguishing end.
        tablefmt: the tabulate format the table is printed in.
        prefer: a width each wrapped column takes first, before any column is dropped
            (``{"next step": 40}``: long advice wraps before a number goes).
        drop_last: headers of columns that go, in this order, only where the table is too
            wide once everything else was done (a code token of a fix wider than its
            column: it is never broken).

    Returns:
        (headers, rows, aligns) of the columns kept, wrapped cells holding line breaks;
        headers of two words may be on two lines.
    """
    table = _Fitting(list(headers), [list(r) for r in rows], list(aligns), width, tablefmt)
    for name, preferred in (prefer or {}).items():
        if name in table.headers and table.too_wide() > 0:
            _rewrap(table.rows, table.headers.index(name), preferred, join=False)
    table.remove(drop)
    # text wraps narrower, headers take two lines, then names go on two lines keeping
    # their distinguishing end; only then are names cut further
    table.wrap_to(wrap, SOFT_WRAP)
    if table.too_wide() > 0:
        table.headers = [_header_lines(h, [r[at] for r in table.rows])
                         for at, h in enumerate(table.headers)]
    table.wrap_to(wrap, MIN_WRAP)
    table.cut_to(cut, keep_end, MAX_NAME_END)
    for floor in (MIN_WRAP, LAST_RESORT):  # a module's distinguishing end outlasts the rest
        table.wrap_to(wrap, floor)
        table.cut_to(cut, keep_end, floor, ends_kept=True)
    if table.too_wide() > 0 and labels:  # a shape on two lines before a module's end goes
        for name in labels:
            table.narrow(name, 1, label_lines)
        table.cut_to(cut, keep_end, LAST_RESORT, ends_kept=True)
    for floor in (MIN_WRAP, LAST_RESORT):
        table.cut_to(cut, keep_end, floor)
    if drop_last and table.too_wide() > 0:
        table.remove(drop_last)
        for name in wrap:  # the room a dropped column left: wrapped text takes it back
            if name in table.headers:
                at = table.headers.index(name)
                _rewrap(table.rows, at, _widest(table.rows, at, name) - table.too_wide())
    return table.headers, table.rows, table.aligns


class _Fitting:
    """A table being fitted: its columns, and the moves :func:`fit_columns` makes."""

    def __init__(self, headers: list[str], rows: list[list[str]], aligns: list[str],
                 width: int, tablefmt: str) -> None:
        self.headers, self.rows, self.aligns = headers, rows, aligns
        self.width, self.tablefmt = width, tablefmt

    def too_wide(self) -> int:
        """How many characters the widest line has too many (<= 0: it fits)."""
        return _width(self.headers, self.rows, self.aligns, self.tablefmt) - self.width

    def remove(self, names: Sequence[str]) -> None:
        """Drop the columns ``names``, in order, until the table fits."""
        for name in names:
            if self.too_wide() <= 0:
                break
            if name in self.headers:
                at = self.headers.index(name)
                del self.headers[at], self.aligns[at]
                for row in self.rows:
                    del row[at]

    def narrow(self, name: str, floor: int, shorter: Callable[[str, int], str]) -> None:
        """Make column ``name`` as much narrower as the table is too wide (not below
        ``floor``), each cell through ``shorter``."""
        excess = self.too_wide()
        if excess <= 0 or name not in self.headers:
            return
        at = self.headers.index(name)
        limit = max(floor, _widest(self.rows, at, name) - excess)
        for row in self.rows:
            row[at] = shorter(str(row[at]), limit)

    def wrap_to(self, names: Sequence[str], floor: int) -> None:
        """Wrap the text of columns ``names`` down to ``floor`` characters."""
        for name in names:
            self.narrow(name, floor,
                        lambda text, limit: _wrapped(text.replace("\n", " "), limit))

    def cut_to(self, names: Sequence[str], keep_end: Sequence[str], floor: int, *,
               ends_kept: bool = False) -> None:
        """Narrow the names of columns ``names`` down to ``floor`` characters; those of
        ``keep_end`` not below their distinguishing end (:func:`distinguishing_width`)
        where it is under ``floor``, or, with ``ends_kept``, at all."""
        for name in names:
            ends = name in keep_end and name in self.headers
            least = distinguishing_width([r[self.headers.index(name)] for r in self.rows]) \
                if ends else 0
            lowest = least if ends_kept else min(least, floor)
            self.narrow(name, max(min(floor, MIN_WRAP), lowest),
                        partial(name_lines, keep_end=name in keep_end))


def _rewrap(rows: list[list[str]], at: int, limit: int, *, join: bool = True) -> None:
    """Wrap column ``at`` of ``rows`` to ``limit`` (its lines joined again first)."""
    for row in rows:
        text = str(row[at])
        row[at] = _wrapped(text.replace("\n", " ") if join else text, limit)


def fit_table(headers: list[str], rows: list[list[str]], aligns: list[str], width: int, *,
              beneath: str, label: str | None = None, tablefmt: str = "plain",
              **options: Any) -> str:
    """A plain table fitted to ``width`` (:func:`fit_columns`), with the text of column
    ``beneath`` (advice, a fix) moved under each row, wrapped to the whole width, where
    the table would otherwise squeeze it narrower than :data:`SOFT_WRAP`::

          #  module                        dir  finding        gain µs
          1  model.…post_attention_layernorm ×8  fwd  ...       1,529.21
             fix: Fuse them: torch.compile the module (one kernel for the chain).

    Args:
        headers, rows, aligns, width: as :func:`fit_columns`.
        beneath: the header of the column that may move under its rows.
        label: what its lines start with (default: its header).
        tablefmt: the tabulate format; only ``plain`` moves a column under its rows.
        options: the other arguments of :func:`fit_columns`.

    Returns:
        The table's text, without a trailing newline.
    """

    wrap = tuple(options.pop("wrap", ()))
    prefer = dict(options.pop("prefer", {}) or {})
    moved: list[str] | None = None
    if tablefmt == "plain" and beneath in headers:
        trial = [[_wrapped(str(c), SOFT_WRAP) if h == beneath else c
                  for h, c in zip(headers, row, strict=True)] for row in rows]
        if _width(headers, trial, aligns, tablefmt) > width:
            at = headers.index(beneath)
            moved = [str(row[at]) for row in rows]
            headers = headers[:at] + headers[at + 1:]
            aligns = aligns[:at] + aligns[at + 1:]
            rows = [row[:at] + row[at + 1:] for row in rows]
    headers, rows, aligns = fit_columns(headers, rows, aligns, width, wrap=wrap,
                                        prefer=prefer, tablefmt=tablefmt, **options)
    table = tabulated(headers, rows, aligns, tablefmt)
    if moved is None:
        return str(table)
    return _with_lines_beneath(str(table), headers, rows, moved, label or beneath, width)


def _with_lines_beneath(table: str, headers: Sequence[str], rows: Sequence[Sequence[str]],
                        texts: Sequence[str], label: str, width: int) -> str:
    """``table`` (tabulate's plain layout: header lines, then each row's lines) with each
    row's text wrapped under it, indented to the table's second column."""
    lines = table.split("\n")
    head = max((h.count("\n") + 1 for h in headers), default=1)
    indent = " " * _second_column(lines[0]) if headers and headers[0] == "#" else "  "
    out, at = lines[:head], head
    for row, text in zip(rows, texts, strict=True):
        height = max((str(cell).count("\n") + 1 for cell in row), default=1)
        out += lines[at:at + height]
        at += height
        flat = " ".join(text.split())
        if flat and flat not in ("-", ""):
            out.append(wrap_text(f"{indent}{label}: {flat}", width, "  "))
    return "\n".join(out + lines[at:])


def _second_column(header: str) -> int:
    """Where the second column of a plain table starts (after ``#`` and its gap)."""
    match = re.match(r"\s*\S+\s+", header)
    return match.end() if match else 2


def _header_lines(header: str, cells: Sequence[str]) -> str:
    """A header of several words on two lines (``headroom`` over ``µs``) where its cells
    are narrower than it."""
    if " " not in header:
        return header
    widest = max((len(line) for c in cells for line in str(c).splitlines()), default=0)
    if widest >= len(header):
        return header
    first, _, rest = header.rpartition(" ")
    return f"{first}\n{rest}" if len(first) >= len(rest) else header.replace(" ", "\n", 1)


def shared_cells(headers: list[str], rows: list[list[str]], aligns: list[str],
                 *, empty: Sequence[str] = ("", "-"), hoist: Sequence[str] = ()
                 ) -> tuple[list[str], list[list[str]], list[str], list[str]]:
    """Take out of a table of two rows or more the columns that say nothing row by row: a
    column empty in every row goes, and a column of ``hoist`` with the same text in every
    row becomes one line said once (a trace's "no counters ..." advice, not ten times).

    Returns:
        (headers, rows, aligns) of the columns kept, and the lines to print under the
        table (``next step: ...``).
    """
    if len(rows) < 2:
        return headers, rows, aligns, []
    keep, lines = [], []
    for at, header in enumerate(headers):
        cells = {str(r[at]) for r in rows}
        if cells <= set(empty):
            continue
        if header in hoist and len(cells) == 1:
            lines.append(f"{header} (every row): {cells.pop()}")
            continue
        keep.append(at)
    return ([headers[i] for i in keep], [[r[i] for i in keep] for r in rows],
            [aligns[i] for i in keep], lines)


def _widest(rows: Sequence[Sequence[str]], at: int, header: str) -> int:
    """The widest line of column ``at`` (its header counted)."""
    return max([len(line) for r in rows for line in str(r[at]).splitlines()] + [len(header)])


def _wrapped(text: str, limit: int) -> str:
    """``text`` wrapped at spaces to ``limit``; a word longer than that (code:
    ``model.to(memory_format=torch.channels_last)``) is never broken: it takes a line of its
    own, and the other lines wrap to its width."""
    import textwrap

    longest = max((len(word) for word in text.split()), default=0)
    return "\n".join(textwrap.wrap(text, max(limit, longest), break_long_words=False,
                                   break_on_hyphens=False)) or text
