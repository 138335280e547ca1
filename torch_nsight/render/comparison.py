"""The text of ``torch-nsight compare``: a one-line verdict, the changed rows folded and
ordered by change (:func:`changes_table`), or the whole module tree (:func:`render_rows`).

Rows come from :func:`torch_nsight.analyze.regress.compare_profiles` and
:func:`torch_nsight.analyze.changes.changed_rows`. Importing this module imports neither
torch nor pandas.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from torch_nsight.render.columns import depth_indent, module_cell
from torch_nsight.render.fit import fit_columns, tabulated
from torch_nsight.render.readable_numbers import (
    MISSING,
    format_us,
    is_missing,
    printable_rows,
    shorten,
)
from torch_nsight.units import counted

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["render_rows", "changes_table", "summary_line", "verdict_line", "count_verdicts",
           "KERNEL_WIDTH"]

KERNEL_WIDTH = 44
_RIGHT = {"baseline µs", "current µs", "change µs", "change %", "headroom µs"}


def count_verdicts(rows: pd.DataFrame) -> dict[str, int]:
    """How many rows got each verdict."""
    return {str(k): int(v) for k, v in rows["verdict"].value_counts().items()}


def summary_line(rows: pd.DataFrame, threshold: float, by: str) -> str:
    """One line: how many rows regressed, improved, stayed, sat in the noise."""
    counts = count_verdicts(rows)
    parts = [f"{counts[v]} {v}" for v in ("regressed", "improved", "within noise",
                                          "unchanged", "fused", "only in baseline",
                                          "only in current", "replaced")
             if counts.get(v)]
    line = (f"{by}s compared at threshold {threshold:g}%: "
            + (", ".join(parts) if parts else "nothing to compare"))
    if not rows.attrs.get("noise_known", True) and (counts.get("regressed")
                                                     or counts.get("improved")):
        line += (" (one run a side: the noise is unknown, so changes were not tested "
                 "against it; record several runs: sweep(runs=3), profile --steps A:A+3)")
    return line


def _change(row: pd.Series) -> str:
    value = row["change_pct"]
    return MISSING if is_missing(value) else f"{float(value):+,.1f}"


def _time(row: pd.Series, side: str) -> str:
    """The mean time, with its 95% interval and runs where the side has several."""
    text = format_us(row[f"{side}_ns"])
    runs = row[f"{side}_runs"]
    if not is_missing(runs) and runs > 1 and not is_missing(row[f"{side}_ci95_ns"]):
        text += f" ±{format_us(row[f'{side}_ci95_ns'])} ({int(runs)} runs)"
    return text


def _pair(row: pd.Series, column: str, fmt: Any) -> str:
    before, after = fmt(row[f"baseline_{column}"]), fmt(row[f"current_{column}"])
    return before if before == after else f"{before} → {after}"


def _text(value: Any) -> str:
    return MISSING if value is None or (not isinstance(value, str) and is_missing(value)) \
        else str(value)


def verdict_line(rows: pd.DataFrame, largest: pd.Series | None, threshold: float,
                 by: str) -> str:
    """The answer in one line: how many rows regressed and improved, of how many, and the
    largest change with its module (``2 regressed, 0 improved of 126 modules at 5%;
    largest: lm_head fwd +2,901.67 µs (+675.3%)``).

    Args:
        rows: the output of ``compare_profiles``.
        largest: the row :func:`torch_nsight.analyze.changes.largest_change` picked.
        threshold: the threshold in percent.
        by: ``module`` or ``kernel``.
    """
    counts = count_verdicts(rows)
    line = (f"{counts.get('regressed', 0)} regressed, {counts.get('improved', 0)} improved "
            f"of {counted(len(rows), by)} at {threshold:g}%")
    if largest is not None:
        where = module_cell(largest)
        if by == "kernel":
            where += f" {shorten(_text(largest['kernel']), 30)}"
        change = ("from no time" if is_missing(largest["change_pct"]) else
                  f"{_change(largest)}%")  # a baseline of 0 ns has no percentage
        line += (f"; largest: {where} {_text(largest['direction'])} "
                 f"{float(largest['change_ns']) / 1e3:+,.2f} µs ({change})")
    return line


def _plain_time(row: pd.Series, side: str) -> str:
    """The mean time with `` ±`` its 95% interval where the side has several runs."""
    text = format_us(row[f"{side}_ns"])
    runs, half = row[f"{side}_runs"], row[f"{side}_ci95_ns"]
    if not is_missing(runs) and runs > 1 and not is_missing(half):
        text += f" ±{format_us(half)}"
    return text


def _change_us(row: pd.Series) -> str:
    value = row["change_ns"]
    return MISSING if is_missing(value) else f"{float(value) / 1e3:+,.2f}"


def changes_table(changed: pd.DataFrame, by: str, fmt: str, width: int) -> str:
    """The changed rows (:func:`torch_nsight.analyze.changes.changed_rows`) as a table:
    module (``×N`` for folded blocks), direction, times, change in µs and percent, verdict,
    bound; fitted to ``width`` in text, whole in markdown.

    Args:
        changed: the rows to show, in order.
        by: ``module`` or ``kernel``.
        fmt: ``table`` (plain text) or ``markdown``.
        width: the characters a line may take (text only).

    Returns:
        The table without a trailing newline.
    """
    headers, columns = _label_columns(changed)
    headers += ["module", "dir"]
    columns += [module_cell, lambda r: _text(r["direction"])]
    if by == "kernel":
        headers.append("kernel")
        columns.append(lambda r: _text(r["kernel"]))
    headers += ["baseline µs", "current µs", "change µs", "change %", "verdict", "bound"]
    columns += [lambda r: _plain_time(r, "baseline"), lambda r: _plain_time(r, "current"),
                _change_us, _change, lambda r: _verdict_cell(r, fmt),
                lambda r: _pair(r, "bound", _text)]
    body = printable_rows([[cell(row) for cell in columns] for _, row in changed.iterrows()])
    aligns = ["right" if h in _RIGHT else "left" for h in headers]
    if fmt != "markdown":
        headers, body, aligns = fit_columns(
            headers, body, aligns, width, drop=("bound", "change %"), wrap=("verdict",),
            cut=("kernel", "module"), keep_end=("module", "kernel"),
            labels=("shape", "variant"), tablefmt="plain")
    return tabulated(headers, body, aligns, "pipe" if fmt == "markdown" else "plain")


def _label_columns(rows: pd.DataFrame) -> tuple[list[str], list[Any]]:
    headers: list[str] = []
    columns: list[Any] = []
    for label in ("variant", "shape"):
        if rows[label].nunique(dropna=False) > 1:
            headers.append(label)
            columns.append(lambda r, label=label: _text(r[label]))
    return headers, columns


def _verdict_cell(row: pd.Series, fmt: str) -> str:
    return f"**{row['verdict']}**" if fmt == "markdown" and row["verdict"] == "regressed" \
        else str(row["verdict"])


def render_rows(rows: pd.DataFrame, by: str, fmt: str, width: int | None = None) -> str:
    """Return the whole comparison (every row, in call-tree order) as a text or markdown
    table, in µs and percent.

    Args:
        rows: the output of ``compare_profiles``.
        by: ``module`` or ``kernel``.
        fmt: ``table`` (plain text) or ``markdown``.
        width: the characters a text line may take (default: the terminal's).

    Returns:
        The table without a trailing newline.
    """
    headers, columns = _label_columns(rows)
    if by == "module":
        headers.append("module")
        columns.append(lambda r: depth_indent(r["depth"]) + _text(r["module"]))
    else:
        headers += ["module", "kernel"]
        columns += [lambda r: _text(r["module_path"]), lambda r: _text(r["kernel"])]
    headers += ["dir", "baseline µs", "current µs", "change %", "verdict", "bound",
                "headroom µs"]
    columns += [lambda r: _text(r["direction"]), lambda r: _time(r, "baseline"),
                lambda r: _time(r, "current"), _change, lambda r: _verdict_cell(r, fmt),
                lambda r: _pair(r, "bound", _text), lambda r: _pair(r, "headroom_ns", format_us)]
    body = printable_rows([[cell(row) for cell in columns] for _, row in rows.iterrows()])
    aligns = ["right" if h in _RIGHT else "left" for h in headers]
    if fmt != "markdown":  # a terminal or a log: fit its width (a pull request keeps all)
        from torch_nsight.render.fit import terminal_width
        headers, body, aligns = fit_columns(
            headers, body, aligns, width or terminal_width(), drop=("headroom µs", "bound"),
            wrap=("verdict",), cut=("module", "kernel"), keep_end=("module", "kernel"),
            labels=("shape", "variant"), tablefmt="plain")
    return tabulated(headers, body, aligns, "pipe" if fmt == "markdown" else "plain")
