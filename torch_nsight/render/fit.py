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

__all__ = ["terminal_width", "fit_columns", "shared_cells", "wrap_text", "DEFAULT_WIDTH"]

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
    each line after the first indented by ``indent``; a word is never broken, and one
    longer than the line gets a line of its own. Line breaks already in ``text`` stay.

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
        out += textwrap.wrap(line, width, subsequent_indent=lead + indent,
                             break_long_words=False, break_on_hyphens=False) or [line]
    return "\n".join(out)


def _width(headers: Sequence[str], rows: Sequence[Sequence[str]], aligns: Sequence[str],
           tablefmt: str = "plain") -> int:
    """The width of the widest line of these columns as a tabulate table.

    A column is as wide as its widest cell, so the table of each column's widest cell is
    as wide as the whole table: one row to lay out, each cell measured once (a table of
    1,000 deep module rows is measured in milliseconds, not by laying it out 27 times).
    """
    from tabulate import tabulate

    widest = [max((str(r[at]) for r in rows), key=_cell_width, default="")
              for at in range(len(headers))]
    text = tabulate([widest] if rows else [], headers=list(headers), tablefmt=tablefmt,
                    disable_numparse=True, colalign=list(aligns))
    return max((len(line) for line in text.splitlines()), default=0)


def fit_columns(headers: list[str], rows: list[list[str]], aligns: list[str], width: int,
                *, drop: Sequence[str] = (), wrap: Sequence[str] = (),
                cut: Sequence[str] = (), keep_end: Sequence[str] = (),
                tablefmt: str = "plain", prefer: dict[str, int] | None = None,
                drop_last: Sequence[str] = ()) -> tuple[list[str], list[list[str]], list[str]]:
    """Drop and wrap columns until a plain table of them fits ``width`` characters.

    Args:
        headers: the column headers.
        rows: the cells, as text.
        aligns: each column's alignment.
        width: the characters a line may take.
        drop: headers of columns that may go, the first to go first.
        wrap: headers of columns whose text may wrap onto several lines (once every
            droppable column went), the first to wrap first; wrapped text is kept whole.
        cut: headers of columns of names, narrowed last: a name wraps onto a second line
            at a ``.``, ``/``, ``_`` or space, and only one that does not fit two lines is
            cut: a name in ``keep_end`` loses its middle and keeps its start and end
            (``blocks.…{0-11}.attn``), the others their end.
        keep_end: see ``cut``.
        tablefmt: the tabulate format the table is printed in.
        prefer: a width each wrapped column takes first, before any column is dropped
            (``{"next step": 40}``: long advice wraps before a number goes).
        drop_last: headers of columns that go, in this order, only where the table is too
            wide once everything else was done (a code token of a fix wider than its
            column: it is never broken).

    Returns:
        (headers, rows, aligns) of the columns kept, wrapped cells holding line breaks.
    """
    headers, rows, aligns = list(headers), [list(r) for r in rows], list(aligns)
    for name, preferred in (prefer or {}).items():
        if name in headers and _width(headers, rows, aligns, tablefmt) > width:
            at = headers.index(name)
            for row in rows:
                row[at] = _wrapped(str(row[at]), preferred)

    def remove(names: Sequence[str]) -> None:
        for name in names:
            if _width(headers, rows, aligns, tablefmt) <= width:
                break
            if name in headers:
                at = headers.index(name)
                del headers[at], aligns[at]
                for row in rows:
                    del row[at]

    remove(drop)

    def narrow(name: str, floor: int, shorter: Callable[[str, int], str]) -> None:
        """Make column ``name`` as much narrower as the table is too wide (not below
        ``floor``), each cell through ``shorter``."""
        excess = _width(headers, rows, aligns, tablefmt) - width
        if excess <= 0 or name not in headers:
            return
        at = headers.index(name)
        limit = max(floor, _widest(rows, at, name) - excess)
        for row in rows:
            row[at] = shorter(str(row[at]), limit)

    # text wraps to SOFT_WRAP, names go on two lines (or are cut), then all get narrower
    for floor in (SOFT_WRAP, MIN_WRAP, LAST_RESORT):
        for name in wrap:
            narrow(name, floor, lambda text, limit: _wrapped(text.replace("\n", " "), limit))
        for name in cut:
            narrow(name, min(floor, MIN_WRAP), partial(_name_lines, keep_end=name in keep_end))
    if drop_last and _width(headers, rows, aligns, tablefmt) > width:
        remove(drop_last)
        for name in wrap:  # the room a dropped column left: wrapped text takes it back
            if name in headers:
                at = headers.index(name)
                room = width - _width(headers, rows, aligns, tablefmt)
                limit = _widest(rows, at, name) + room
                for row in rows:
                    row[at] = _wrapped(str(row[at]).replace("\n", " "), limit)
    return headers, rows, aligns


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


def _cut(text: str, limit: int, *, keep_end: bool) -> str:
    """``text`` in ``limit`` characters: its start and ``…``, or with ``keep_end`` its
    start, ``…`` and its end."""
    if len(text) <= limit:
        return text
    if not keep_end:
        return text[:limit - 1] + "…"
    head = (limit - 1) // 3
    return text[:head] + "…" + text[len(text) - (limit - 1 - head):]


def _name_lines(text: str, limit: int, *, keep_end: bool) -> str:
    """A name on at most two lines of ``limit`` characters, broken after a ``.``, ``/``,
    ``_`` or space. Where two lines do not hold it, the first line keeps its start and the
    second its end (``keep_end``: ``transformer.h.…`` over ``mlp.c_fc ×12``), or its next
    part ending in ``…``; neither line starts with ``…``."""
    text = text.replace("\n", "")
    if len(text) <= limit:
        return text
    lines = [""]
    for piece in re.findall(r"[^./_ ]+[./_ ]?|[./_ ]", text):
        if lines[-1] and len(lines[-1]) + len(piece.rstrip()) > limit:
            lines.append("")
        lines[-1] += piece
    # a line keeps the space it broke at, so that joining the lines gives the name back
    if len(lines) <= 2 and all(len(line.rstrip()) <= limit for line in lines):
        return "\n".join(lines)
    if len(lines[0]) > limit:  # no break in its first line's width
        return _cut(text, limit, keep_end=keep_end)
    first = lines[0].rstrip()
    rest = text[len(lines[0]):]
    if not keep_end:
        return first + "\n" + _cut(rest, limit, keep_end=False)
    while len(first) + 1 > limit:  # room for the "…" that says a part is left out
        first = first[:-1]
    tail = ""
    for piece in reversed(re.findall(r"[./_ ]?[^./_ ]+|[./_ ]", rest)):
        if len(tail) + len(piece) > limit:
            break
        tail = piece + tail
    tail = tail.lstrip(" ./_") or rest[len(rest) - limit:]
    return first + "…\n" + tail


def _wrapped(text: str, limit: int) -> str:
    """``text`` wrapped at spaces to ``limit``; a word longer than that (code:
    ``model.to(memory_format=torch.channels_last)``) is never broken: it takes a line of its
    own, and the other lines wrap to its width."""
    import textwrap

    longest = max((len(word) for word in text.split()), default=0)
    return "\n".join(textwrap.wrap(text, max(limit, longest), break_long_words=False,
                                   break_on_hyphens=False)) or text
