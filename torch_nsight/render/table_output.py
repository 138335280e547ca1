"""Tables that answer "which module is slow, and why": text for people, files for tools.

:func:`render_table` formats a :class:`~torch_nsight.Profile` with tabulate, in readable
units (µs, GFLOP, %); :func:`write_table` writes the same rows to a file chosen by suffix:
raw numbers with unit-named columns (``duration_ns``) for ``.csv``, ``.parquet`` and
``.json``, the rendered text for ``.txt`` and ``.md``.

Every kind of table is declared once, in :data:`~torch_nsight.render.kinds.TABLE_KINDS`.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Union

from tabulate import tabulate, tabulate_formats

from torch_nsight.files import atomic_output
from torch_nsight.render.columns import KERNEL_WIDTH, whole_cells
from torch_nsight.render.fit import fit_table, shared_cells, terminal_width, wrap_text
from torch_nsight.render.kinds import (
    DEFAULT_ROWS,
    HOTSPOT_ORDERS,
    TABLE_KINDS,
    TABLES,
    TableKind,
    TableSpec,
)
from torch_nsight.render.readable_numbers import CONTROL, printable, printable_rows

if TYPE_CHECKING:
    import pandas as pd

    from torch_nsight.analyze.hotspots import HotspotOrder
    from torch_nsight.profile import Profile

logger = logging.getLogger(__name__)

__all__ = ["FORMATS", "SUFFIXES", "KERNEL_WIDTH", "DEFAULT_ROWS", "TABLE_KINDS", "TABLES",
           "TableKind", "table_frame", "render_table", "write_table", "frame_text", "csv_frame",
           "csv_cell", "json_escaped"]

PathArg = Union[str, "os.PathLike[str]"]

#: Table formats: every tabulate format, plus ``markdown`` (tabulate's ``pipe``).
FORMATS: tuple[str, ...] = ("plain", "github", "markdown",
                            *sorted(f for f in tabulate_formats
                                    if f not in ("plain", "github")))
SUFFIXES: tuple[str, ...] = (".csv", ".parquet", ".json", ".txt", ".md")
_ALIASES = {"markdown": "pipe"}


def _check(what: Any, n: Any, order: Any, depth: Any) -> TableSpec:
    if what not in TABLE_KINDS:
        raise ValueError(f"what must be one of {', '.join(TABLES)}; got {what!r}")
    if n is not None and (not isinstance(n, int) or isinstance(n, bool) or n < 1):
        raise ValueError(f"n must be None or a positive integer, got {n!r}")
    if order not in HOTSPOT_ORDERS:
        raise ValueError(f"order must be one of {', '.join(HOTSPOT_ORDERS)}; got {order!r}")
    if depth is not None and (not isinstance(depth, int) or isinstance(depth, bool)
                              or depth < 0):
        raise ValueError(f"depth must be None or an integer >= 0, got {depth!r}")
    return TABLE_KINDS[what]


def table_frame(profile: Profile, what: TableKind = "hotspots", *, n: int | None = None,
                order: HotspotOrder = "headroom", depth: int | None = None,
                fold: bool = True) -> pd.DataFrame:
    """Return the rows of a table as raw numbers (the analysis columns, units in names).

    Args:
        profile: the profile.
        what: a kind of :data:`TABLE_KINDS`: ``hotspots`` (kernel sites ranked by ``order``),
            ``modules`` (the module tree, in call-tree order), ``kernel_names`` (one row per
            kernel name), ``launches`` (every launch, in launch order), ``shapes``,
            ``ranks`` or ``findings``.
        n: how many rows; None: :data:`DEFAULT_ROWS` (top 10 hotspots, all the rest).
        order: hotspot order, ``headroom`` (recoverable time) or ``time``.
        depth: deepest module level kept in the ``modules`` table (root = 0).
        fold: rows of hotspots and findings that differ only by the index of a repeated
            block become one row (see :mod:`torch_nsight.analyze.fold`).

    Returns:
        A DataFrame: :meth:`Profile.hotspot_table`, :meth:`Profile.module_table`, or the
        kernel table without its range tuple columns.

    Raises:
        ValueError: an argument is out of range.
    """
    spec = _check(what, n, order, depth)
    return spec.rows(profile, n if n is not None else spec.default_rows, order, depth, fold)


#: Columns a text table drops, in this order, to fit the terminal (see render/fit.py) ...
DROP_FIRST = ("reason", "fused", "launches", "share %", "% of roof", "op", "GFLOP", "FLOP/B",
              "self µs", "kernels", "mean µs", "modules", "TFLOP/s", "GB/s", "precision",
              "its %", "in modules %")
#: Formats read in a terminal or a log, fitted to its width; markdown, HTML and the rest
#: keep every column.
TEXT_FORMATS = ("plain", "simple", "grid", "simple_grid", "rounded_grid", "heavy_grid",
                "mixed_grid", "double_grid", "fancy_grid", "outline", "simple_outline",
                "rounded_outline", "heavy_outline", "mixed_outline", "double_outline",
                "fancy_outline", "psql", "presto", "pretty", "rst", "orgtbl")
#: ... then the columns whose text wraps onto more lines, then those cut short.
WRAP_FIRST = ("next step", "fix")
CUT_LAST = ("kernel", "module", "top module", "shape", "variant")
#: Label columns, on two lines (``2x512x`` over ``256``) before a module loses its end.
LABELS = ("shape", "variant")
#: ... and last, where a code token of a fix still does not fit, these columns go (never
#: ``dir``: it tells a module's forward row from its backward one).
DROP_LAST = ("confidence", "basis")


def render_table(profile: Profile, what: TableKind = "hotspots", fmt: str = "plain",
                 n: int | None = None, *, order: HotspotOrder = "headroom",
                 depth: int | None = None, fold: bool = True) -> str:
    """Return a table of the profile as text, in readable units.

    Times are in µs per run, ``share %`` is the share of the (variant, shape)'s GPU time,
    ``% of roof`` the roofline ceiling's time over the actual time, and ``headroom µs`` the
    time recoverable at that ceiling (see docs/roofline.md). Kernel names longer than
    :data:`KERNEL_WIDTH` characters are cut (``…``); :func:`write_table` keeps them whole.

    Args:
        profile: the profile.
        what: a kind of :data:`TABLE_KINDS` (see :func:`table_frame`).
        fmt: a tabulate format (``plain``, ``github``, ``grid``...) or ``markdown``.
        n: how many rows; None: :data:`DEFAULT_ROWS`.
        order: hotspot order, ``headroom`` or ``time``.
        depth: deepest module level in the ``modules`` table.
        fold: fold repeated blocks into one row (see :func:`table_frame`).

    Returns:
        The table, without a trailing newline; a one-line note when it has no rows.

    Raises:
        ValueError: an argument is out of range or ``fmt`` is unknown.
    """
    if fmt not in FORMATS:
        raise ValueError(f"fmt must be one of {', '.join(FORMATS)}; got {fmt!r}")
    frame = table_frame(profile, what, n=n, order=order, depth=depth, fold=fold)
    if frame.empty:
        return f"(no {what.replace('_', ' ')} to show: the profile has no kernels)"
    columns = TABLE_KINDS[what].columns(frame, profile.kernels)
    text = _ALIASES.get(fmt, fmt) in TEXT_FORMATS
    with contextlib.nullcontext() if text else whole_cells():  # markdown, HTML: nothing cut
        rows = printable_rows([[cell(row) for _, cell, _ in columns]
                               for _, row in frame.iterrows()])
    headers = [header for header, _, _ in columns]
    aligns = [align for _, _, align in columns]
    notes: list[str] = []
    width = terminal_width()
    tablefmt = _ALIASES.get(fmt, fmt)
    logger.debug("rendering %d %s rows as %s", len(rows), what, fmt)
    if text:  # a terminal or a log: fit its width
        headers, rows, aligns, notes = shared_cells(headers, rows, aligns,
                                                    hoist=("next step",))
        table = fit_table(headers, rows, aligns, width,
                          beneath="fix" if "fix" in headers else "next step",
                          drop=DROP_FIRST, wrap=WRAP_FIRST, cut=CUT_LAST,
                          keep_end=("module", "top module"), labels=LABELS,
                          tablefmt=tablefmt,
                          prefer={"next step": 40, "fix": 60}, drop_last=DROP_LAST)
    else:
        table = tabulate(rows, headers=headers, tablefmt=tablefmt, disable_numparse=True,
                         colalign=aligns)
    return "\n".join([table, *(wrap_text(line, width) for line in notes)])


def _nested_as_json(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` with each column of dicts, lists or tuples (a finding's ``fix_params``,
    ``facts``, ``shapes``) as JSON text: Parquet holds no column of mixed nested values."""
    import json

    out = frame.copy()
    for column in out.columns:
        if out[column].map(lambda v: isinstance(v, (dict, list, tuple))).any():
            out[column] = out[column].map(
                lambda v: None if v is None or (isinstance(v, float) and v != v)
                else json.dumps(v, default=str))
    return out


def write_table(profile: Profile, path: PathArg, what: TableKind = "hotspots",
                n: int | None = None, *, order: HotspotOrder = "headroom",
                depth: int | None = None, fold: bool = True) -> Path:
    """Write a table to a file whose suffix chooses the format.

    ``.csv``, ``.parquet`` and ``.json`` (a list of records) hold the raw numbers of
    :func:`table_frame`, every column and full kernel names; ``.txt`` holds the plain text
    of :func:`render_table` and ``.md`` its markdown. An existing file is replaced.

    Args:
        profile: the profile.
        path: the file to write.
        what: a kind of :data:`TABLE_KINDS`.
        n: how many rows; None: :data:`DEFAULT_ROWS`.
        order: hotspot order, ``headroom`` or ``time``.
        depth: deepest module level in the ``modules`` table.
        fold: fold repeated blocks into one row (see :func:`table_frame`).

    Returns:
        The path written.

    Raises:
        ValueError: the suffix is not one of :data:`SUFFIXES`, or an argument is out of
            range.
        OSError: the file cannot be written.
    """
    target = Path(path)
    suffix = target.suffix.lower()
    if suffix not in SUFFIXES:
        raise ValueError(f"path must end in one of {', '.join(SUFFIXES)}; got {target.name!r}")
    if suffix in (".txt", ".md"):
        text = render_table(profile, what, "plain" if suffix == ".txt" else "markdown", n,
                            order=order, depth=depth, fold=fold)
        with atomic_output(target) as temp:
            temp.write_text(text + "\n", encoding="utf-8")
    else:
        frame = table_frame(profile, what, n=n, order=order, depth=depth, fold=fold)
        with atomic_output(target) as temp:
            if suffix == ".csv":
                csv_frame(frame).to_csv(temp, index=False)
            elif suffix == ".parquet":
                with open(temp, "wb") as file:  # pyarrow opens no name that is not UTF-8
                    _nested_as_json(frame).to_parquet(file, index=False)
            else:
                temp.write_text(frame_text(frame, "json", indent=2), encoding="utf-8")
    logger.info("wrote %s table to %s", what, target)
    return target


#: What a spreadsheet takes for a formula at the start of a cell (tab and CR then show
#: escaped, after the quote).
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
_NUMBER = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")


def csv_cell(value: Any) -> Any:
    """A csv cell safe to open in a spreadsheet and to print: text escaped
    (:func:`~torch_nsight.render.readable_numbers.printable`) and, where it would start a formula
    (``=``, ``+``, ``-``, ``@``, a tab, a CR), after a ``'``; numbers, and text that is a plain
    number (``-1.5``), unchanged; a mapping, list or tuple (a finding's ``fix_params`` and
    ``facts``, a call's shapes) as JSON text, which a reader parses back, not as Python's
    repr."""
    if isinstance(value, (dict, list, tuple)):
        import json

        value = json.dumps(_plain(value), default=str, ensure_ascii=False)
    if not isinstance(value, str):
        return value
    text = printable(value)
    if value.startswith(_FORMULA_START) and not _NUMBER.fullmatch(value):
        return "'" + text
    return text


def _plain(value: Any) -> Any:
    """``value`` as JSON takes it: mapping keys as text, tuples as lists, numpy scalars and
    arrays as Python's numbers and lists."""
    if isinstance(value, dict):
        return {str(key): _plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    tolist = getattr(value, "tolist", None)  # a numpy scalar or array
    return _plain(tolist()) if callable(tolist) and not isinstance(value, str) else value


def csv_frame(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` with the cells of its text columns through :func:`csv_cell`; numeric and
    boolean columns are left as they are (``-1.5`` stays a number)."""
    import pandas as pd

    safe = frame.copy(deep=False)
    for column in frame.columns:
        if not (pd.api.types.is_numeric_dtype(frame[column])
                or pd.api.types.is_bool_dtype(frame[column])):
            safe[column] = frame[column].map(csv_cell)
    return safe


def json_escaped(text: str) -> str:
    """JSON text with every control character of :data:`~torch_nsight.render.readable_numbers.CONTROL`
    written as its JSON escape (``\\u001b``, ``\\u202e``): the same document to a reader,
    nothing a terminal acts on. (A serializer writes such characters only inside strings,
    where the escape means the same; the newlines and spaces of its layout are kept.)"""
    return CONTROL.sub(lambda m: m.group() if m.group() in "\n\r\t" else
                       f"\\u{ord(m.group()):04x}", text)


def frame_text(frame: pd.DataFrame, fmt: Literal["csv", "json"], *,
               indent: int | None = None) -> str:
    """The rows of ``frame`` as csv (a header line, cells through :func:`csv_cell`) or
    as a JSON list of records (through :func:`json_escaped`): what ``--format csv|json``
    prints and ``--csv``/``--json`` write.

    Args:
        frame: raw numbers (:func:`table_frame`), findings or a comparison's rows.
        fmt: ``csv`` or ``json``.
        indent: the JSON's indentation (None: one line).

    Returns:
        The text, ending in a newline.
    """
    if fmt == "csv":
        return str(csv_frame(frame).to_csv(index=False))
    return json_escaped(str(frame.to_json(orient="records", force_ascii=False,
                                          indent=indent))) + "\n"
