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

from torch_nsight.cli.arguments import at_least
from torch_nsight.render.comparison import (
    changes_table,
    count_verdicts,
    render_rows,
    summary_line,
    verdict_line,
)
from torch_nsight.render.fit import terminal_width, wrap_text
from torch_nsight.render.readable_numbers import printable

if TYPE_CHECKING:
    import pandas as pd

    from torch_nsight.profile import Profile

FORMATS = ("table", "markdown", "csv", "json")
LEVELS = ("module", "kernel")
DEFAULT_THRESHOLD = 5.0
DEFAULT_TOP = 20


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
        "got slower by more than --threshold (beyond the noise of repeated runs), 0 otherwise. "
        "The table opens with a one-line verdict and shows the changed rows only, the "
        "largest change first (--all: every row).")
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
    parser.add_argument("--depth", type=at_least(0), default=None, metavar="N",
                        help="deepest module level (root = 0); deeper modules fold into "
                             "their ancestor")
    shown = parser.add_mutually_exclusive_group()
    shown.add_argument("--top", type=at_least(1), default=DEFAULT_TOP, metavar="N",
                       help="show the N largest changes (default: %(default)s); regressions "
                            "come first, repeated blocks are folded")
    shown.add_argument("--all", action="store_true",
                       help="show every row, changed or not, as the module tree")
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


def write_output(rows: pd.DataFrame, args: argparse.Namespace, header: list[str],
                 notes: list[str], stream: TextIO,
                 kernels: tuple[pd.DataFrame, pd.DataFrame]) -> None:
    """Write the comparison to ``stream`` in ``args.fmt``: csv and json every row; a table
    or markdown the verdict first, then the changed rows folded and ordered by change (at
    most ``args.top``), or every row with ``args.all``.

    Args:
        rows: the output of ``compare_profiles``.
        args: the parsed options.
        header: what the two profiles are, one line each.
        notes: warnings, one sentence each.
        stream: where it goes.
        kernels: the baseline's and the current kernel tables (the changed rows fold where
            their modules launched the same kernels on both sides).
    """
    from torch_nsight.analyze.changes import changed_rows, largest_change
    from torch_nsight.render.table_output import frame_text, json_escaped

    if args.fmt == "csv":
        stream.write(frame_text(rows, "csv"))
        return
    if args.fmt == "json":
        document = {"baseline": str(args.baseline), "current": str(args.current),
                    "by": args.by, "threshold_pct": args.threshold, "notes": notes,
                    "verdicts": count_verdicts(rows),
                    "rows": json.loads(rows.to_json(orient="records", force_ascii=False))}
        stream.write(json_escaped(json.dumps(document, indent=2, ensure_ascii=False)) + "\n")
        return
    changed = changed_rows(rows, *kernels)
    verdict = verdict_line(rows, largest_change(changed), args.threshold, args.by)
    summary = summary_line(rows, args.threshold, args.by)
    shown = changed if args.top is None else changed.head(args.top)
    markdown = args.fmt == "markdown"
    width = terminal_width()
    if args.all:
        table = render_rows(rows, args.by, args.fmt, width)
    elif len(shown):
        table = changes_table(shown, args.by, args.fmt, width)
    else:
        table = ""
    footer = _footer(len(shown), len(changed), args)
    # the lines hold names read from the files (GPUs, modules, paths): escaped, one line each
    if markdown:
        lines = [printable(f"### torch-nsight compare: {verdict}"), ""]
        lines += [printable(f"- {line}") for line in [*header, summary]]
        lines += [printable(f"- **warning:** {note}") for note in notes]
        lines += ["", table] if table else []
        lines += ["", footer] if footer else []
    else:
        lines = [wrap_text(printable(line), width) for line in
                 [verdict, *header, *(f"warning: {note}" for note in first_notes(notes)),
                  summary]]
        lines += ["", table] if table else []
        lines += ["", wrap_text(footer, width)] if footer else []
    print("\n".join(lines), file=stream)


#: Notes a terminal shows before saying how many more there are.
NOTES_SHOWN = 3


def first_notes(notes: list[str]) -> list[str]:
    """The first :data:`NOTES_SHOWN` notes, and one more line saying how many are left out
    (``--format json`` lists every one)."""
    if len(notes) <= NOTES_SHOWN + 1:
        return notes
    return [*notes[:NOTES_SHOWN], f"{len(notes) - NOTES_SHOWN} more notes like these "
                                  "(--format json lists them all)"]


def _footer(shown: int, changed: int, args: argparse.Namespace) -> str:
    """What the table leaves out and how to see it."""
    if args.all:
        return ""
    if not changed:
        return (f"nothing changed beyond {args.threshold:g}% (or beyond the noise): --all "
                "shows every row")
    if shown < changed:
        return (f"{shown} of {changed} changed rows shown (repeated blocks folded): "
                "--top N shows more, --all every row")
    return ""


def load_side(side: str, path: Path) -> Profile:
    """One side of the comparison, read strictly: a damaged file (a report cut short,
    events or rows left out) is an error naming the side, never a run that looks faster.

    Args:
        side: ``baseline`` or ``current``.
        path: what the command line named.

    Returns:
        The profile.

    Raises:
        TorchNsightError: the side cannot be read, or is damaged; the message opens with
            the side (``the current profile (CURRENT): ...``).
    """
    from torch_nsight.errors import TorchNsightError
    from torch_nsight.loading import load

    try:
        return load(path, strict=True)
    except TorchNsightError as err:
        raise type(err)(f"the {side} profile ({side.upper()}) cannot be compared: {err}"
                        ) from err


#: Below this share (%) of either side's time in rows both profiles hold, the comparison says
#: it covers only that part (two different models, or shapes, compared).
MATCHED_PCT = 50.0
_ONE_SIDED = ("only in baseline", "only in current", "fused")


def matched_notes(rows: pd.DataFrame) -> list[str]:
    """A note where the rows both profiles hold carry under :data:`MATCHED_PCT` of either
    side's time: the verdicts then speak of that part only (different models or shapes?)."""
    rows = rows[rows["verdict"] != "replaced"]  # their time is in the rows that replaced them
    both = ~rows["verdict"].isin(_ONE_SIDED)
    shares = []
    for side in ("baseline_ns", "current_ns"):
        total = float(rows[side].sum())
        shares.append(100.0 * float(rows.loc[both, side].sum()) / total if total > 0
                      else 100.0)
    if min(shares) >= MATCHED_PCT:
        return []
    return [f"the rows both profiles hold carry {shares[0]:.1f}% of the baseline's time and "
            f"{shares[1]:.1f}% of the current's ({int(both.sum())} of {len(rows)} rows): "
            "different models or shapes? The verdicts speak of that part only"]


def run(args: argparse.Namespace) -> int:
    """Run ``torch-nsight compare``.

    Args:
        args: the parsed options.

    Returns:
        1 when a row regressed beyond the threshold (and the noise), or when no row of the
        two profiles matched; 0 otherwise.

    Raises:
        TorchNsightError: a profile is missing, unreadable or damaged (``ReportError``,
            naming the side), or lacks the columns the comparison needs.
    """
    from torch_nsight.analyze.regress import compare_profiles

    baseline = load_side("baseline", args.baseline)
    current = load_side("current", args.current)
    rows = compare_profiles(baseline.kernels, current.kernels, by=args.by,
                            threshold=args.threshold, depth=args.depth)
    unmatched = bool(len(rows)) and bool(rows["verdict"].isin(_ONE_SIDED).all())
    notes = [*rows.attrs.get("notes", []), *provenance_notes(baseline, current),
             *([] if unmatched or rows.empty else matched_notes(rows))]
    # the table and markdown say them too: a terminal showing both would read them twice
    # (not when nothing matched: no table follows)
    if unmatched or args.fmt in ("csv", "json") or not _same_terminal():
        for note in first_notes(notes):
            print(wrap_text(printable(f"torch-nsight: warning: {note}")), file=sys.stderr)
    if unmatched:
        from torch_nsight.errors import TorchNsightError

        # an error prints no table: one line on stderr (cli/main.py), nothing on stdout
        raise TorchNsightError("no row of the two profiles matched (different models, "
                               "shapes or labels?): nothing was compared, so this is not "
                               "a pass")
    header = [f"baseline {args.baseline}: {baseline.describe()}",
              f"current {args.current}: {current.describe()}"]
    write_output(rows, args, header, notes, sys.stdout, (baseline.kernels, current.kernels))
    return 1 if (rows["verdict"] == "regressed").any() else 0


def _same_terminal() -> bool:
    """Whether standard output and standard error are one terminal."""
    try:
        return sys.stdout.isatty() and sys.stderr.isatty()
    except (AttributeError, ValueError):  # replaced or closed streams
        return False


__all__ = ["add_parser", "run", "parse_threshold", "render_rows", "summary_line",
           "provenance_notes"]
