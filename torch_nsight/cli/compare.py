"""``torch-nsight compare``: two profiles of one model, module by module; exit 1 on a regression.

A CI gate: ``torch-nsight compare main.ncu-rep.xz branch.ncu-rep.xz --threshold 5%`` exits
1 when a module (or kernel, ``--by kernel``) got slower by more than the threshold, beyond
the noise of repeated runs, and 0 otherwise. The rows come from
:func:`torch_nsight.analyze.regress.compare_profiles`. Importing this module imports neither
torch nor pandas.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from torch_nsight.cli.report import _count
from torch_nsight.render.units import MISSING, format_us, is_missing, printable_rows, shorten

if TYPE_CHECKING:
    import pandas as pd

    from torch_nsight.profile import Profile

FORMATS = ("table", "markdown", "csv", "json")
LEVELS = ("module", "kernel")
DEFAULT_THRESHOLD = 5.0
KERNEL_WIDTH = 44


def parse_threshold(text: str) -> float:
    """An argparse type: a percentage, ``5%`` or ``5`` (>= 0).

    Args:
        text: the option's value.

    Returns:
        The percentage (5.0 for ``5%``).

    Raises:
        argparse.ArgumentTypeError: not a finite number >= 0.
    """
    number = text.strip().removesuffix("%").strip()
    try:
        value = float(number)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a percentage (e.g. 5%)") from None
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r} must be a finite percentage >= 0")
    return value


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add the ``compare`` subcommand to the top-level ``subparsers``; return its parser."""
    parser = subparsers.add_parser(
        "compare", help="compare two profiles module by module; exit 1 on a regression",
        description="Line up the modules (or kernels) of two profiles of the same model: time, "
        "bound and headroom before and after, change in percent. Exit status 1 when anything "
        "got slower by more than --threshold (beyond the noise of repeated runs), 0 otherwise.")
    for name, when in (("baseline", "before"), ("current", "after")):
        parser.add_argument(name, type=Path, metavar=name.upper(),
                            help=f"the profile {when} the change: a report (.ncu-rep, "
                                 ".ncu-rep.xz), a saved profile (.parquet) or a sweep's "
                                 "output directory")
    parser.add_argument("--threshold", type=parse_threshold, default=DEFAULT_THRESHOLD,
                        metavar="PCT", help="a change beyond this percentage is called "
                                            "(default: 5%%)")
    parser.add_argument("--by", choices=LEVELS, default="module",
                        help="line up modules (inclusive time) or kernel sites "
                             "(default: module)")
    parser.add_argument("--format", dest="fmt", choices=FORMATS, default="table",
                        help="output on standard output (default: table)")
    parser.add_argument("--depth", type=_count(0), default=None, metavar="N",
                        help="deepest module level (root = 0); deeper modules fold into "
                             "their ancestor")
    return parser


def provenance_notes(baseline: Profile, current: Profile) -> list[str]:
    """What the two profiles' metadata says makes them hard to compare: the ncu versions.

    (GPUs and metric sets are checked on the rows by ``compare_profiles``.)

    Args:
        baseline: the profile before the change.
        current: the profile after it.

    Returns:
        One sentence per difference.
    """
    versions = [sorted({s.ncu_version for s in p.meta.sources if s.ncu_version})
                for p in (baseline, current)]
    if versions[0] and versions[1] and versions[0] != versions[1]:
        return [f"the profiles were recorded by different ncu versions (baseline "
                f"{', '.join(versions[0])}; current {', '.join(versions[1])})"]
    return []


def _count_verdicts(rows: pd.DataFrame) -> dict[str, int]:
    return {str(k): int(v) for k, v in rows["verdict"].value_counts().items()}


def summary_line(rows: pd.DataFrame, threshold: float, by: str) -> str:
    """One line: how many rows regressed, improved, stayed, sat in the noise."""
    counts = _count_verdicts(rows)
    parts = [f"{counts[v]} {v}" for v in ("regressed", "improved", "within noise",
                                          "unchanged", "fused", "only in baseline",
                                          "only in current")
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


def render_rows(rows: pd.DataFrame, by: str, fmt: str) -> str:
    """Return the comparison as a text or markdown table, in µs and percent.

    Args:
        rows: the output of ``compare_profiles``.
        by: ``module`` or ``kernel``.
        fmt: ``table`` (plain text) or ``markdown``.

    Returns:
        The table without a trailing newline.
    """
    from tabulate import tabulate

    headers: list[str] = []
    columns: list[Any] = []
    if rows["variant"].nunique(dropna=False) > 1:
        headers.append("variant")
        columns.append(lambda r: _text(r["variant"]))
    if rows["shape"].nunique(dropna=False) > 1:
        headers.append("shape")
        columns.append(lambda r: _text(r["shape"]))
    if by == "module":
        headers.append("module")
        columns.append(lambda r: "· " * int(r["depth"] if not is_missing(r["depth"]) else 0)
                       + _text(r["module"]))
    else:
        headers += ["module", "kernel"]
        columns += [lambda r: _text(r["module_path"]),
                    lambda r: _text(r["kernel"]) if fmt == "markdown"
                    else shorten(_text(r["kernel"]), KERNEL_WIDTH)]
    headers += ["dir", "baseline µs", "current µs", "change %", "verdict", "bound",
                "headroom µs"]
    columns += [lambda r: _text(r["direction"]), lambda r: _time(r, "baseline"),
                lambda r: _time(r, "current"), _change,
                lambda r: f"**{r['verdict']}**" if fmt == "markdown"
                and r["verdict"] == "regressed" else str(r["verdict"]),
                lambda r: _pair(r, "bound", _text), lambda r: _pair(r, "headroom_ns", format_us)]
    body = printable_rows([[cell(row) for cell in columns] for _, row in rows.iterrows()])
    right = {"baseline µs", "current µs", "change %", "headroom µs"}
    aligns = ["right" if h in right else "left" for h in headers]
    if fmt != "markdown":  # a terminal or a log: fit its width (a pull request keeps all)
        from torch_nsight.render.fit import fit_columns, terminal_width

        headers, body, aligns = fit_columns(
            headers, body, aligns, terminal_width(), drop=("headroom µs", "bound"),
            cut=("module", "kernel"), keep_end=("module",), tablefmt="plain")
    return tabulate(body, headers=headers, tablefmt="pipe" if fmt == "markdown" else "plain",
                    disable_numparse=True, colalign=aligns)


def write_output(rows: pd.DataFrame, args: argparse.Namespace, header: list[str],
                 notes: list[str], stream: TextIO) -> None:
    """Write the comparison to ``stream`` in ``args.fmt``.

    Args:
        rows: the output of ``compare_profiles``.
        args: the parsed options.
        header: what the two profiles are, one line each.
        notes: warnings, one sentence each.
        stream: where it goes.
    """
    summary = summary_line(rows, args.threshold, args.by)
    if args.fmt == "csv":
        rows.to_csv(stream, index=False)
    elif args.fmt == "json":
        document = {"baseline": str(args.baseline), "current": str(args.current),
                    "by": args.by, "threshold_pct": args.threshold, "notes": notes,
                    "verdicts": _count_verdicts(rows),
                    "rows": json.loads(rows.to_json(orient="records", force_ascii=False))}
        json.dump(document, stream, indent=2, ensure_ascii=False)
        stream.write("\n")
    elif args.fmt == "markdown":
        lines = [f"### torch-nsight compare: {summary}", ""]
        lines += [f"- {line}" for line in header]
        lines += [f"- **warning:** {note}" for note in notes]
        print("\n".join(lines), file=stream)
        print(file=stream)
        print(render_rows(rows, args.by, "markdown"), file=stream)
    else:
        for line in [*header, *(f"warning: {note}" for note in notes), summary]:
            print(line, file=stream)
        print(file=stream)
        print(render_rows(rows, args.by, "table"), file=stream)


def run(args: argparse.Namespace) -> int:
    """Run ``torch-nsight compare``.

    Args:
        args: the parsed options.

    Returns:
        1 when a row regressed beyond the threshold (and the noise), or when no row of the
        two profiles matched; 0 otherwise.

    Raises:
        TorchNsightError: a profile is missing or unreadable (``ReportError``), or lacks
            the columns the comparison needs.
    """
    from torch_nsight.analyze.regress import compare_profiles
    from torch_nsight.loading import load

    baseline = load(args.baseline)
    current = load(args.current)
    rows = compare_profiles(baseline.kernels, current.kernels, by=args.by,
                            threshold=args.threshold, depth=args.depth)
    notes = [*rows.attrs.get("notes", []), *provenance_notes(baseline, current)]
    for note in notes:
        print(f"torch-nsight: warning: {note}", file=sys.stderr)
    header = [f"baseline {args.baseline}: {baseline.describe()}",
              f"current {args.current}: {current.describe()}"]
    write_output(rows, args, header, notes, sys.stdout)
    if len(rows) and rows["verdict"].isin(("only in baseline", "only in current",
                                           "fused")).all():
        print("torch-nsight: error: no row of the two profiles matched (different models, "
              "shapes or labels?): nothing was compared, so this is not a pass", file=sys.stderr)
        return 1
    return 1 if (rows["verdict"] == "regressed").any() else 0


__all__ = ["add_parser", "run", "parse_threshold", "render_rows", "summary_line",
           "provenance_notes"]
