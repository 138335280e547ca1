"""``torch-nsight report``: tables and plots from ``.ncu-rep`` reports or saved profiles.

Importing this module imports neither torch nor pandas: ``--help`` and argument errors are
instant, and reading reports never loads torch.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from torch_nsight.cli.arguments import at_least
from torch_nsight.cli.outputs import UsageError, add_force, check_outputs, writing
from torch_nsight.cli.text import say
from torch_nsight.render.kinds import GROUPINGS, HOTSPOT_ORDERS, TABLE_KINDS

if TYPE_CHECKING:
    from torch_nsight.profile import Profile

logger = logging.getLogger(__name__)

FORMAT_CHOICES = ("table", "plain", "github", "markdown", "simple", "grid", "rst", "csv",
                  "json")
#: Formats for machines: the raw numbers of the table alone on standard output.
DATA_FORMATS = ("csv", "json")
TABLE_OUTPUTS = ("csv", "parquet", "json")


def add_table_options(parser: argparse.ArgumentParser) -> None:
    """Add the options that choose and shape the printed table.

    ``--by`` names what a row is, singular (``module``); its choices and their help come
    from :data:`torch_nsight.render.kinds.TABLE_KINDS` through
    :data:`~torch_nsight.render.kinds.GROUPINGS`. :func:`settle_table_options` turns the
    parsed options into ``args.table``, ``args.order`` and ``args.n``.

    Args:
        parser: a subcommand's parser.
    """
    kinds = "; ".join(f"{name}: {TABLE_KINDS[table].summary}"
                      for name, table in GROUPINGS.items())
    parser.add_argument("--by", choices=tuple(GROUPINGS), default=None,
                        help=f"what a row is (default: hotspot). {kinds}")
    parser.add_argument("--sort", choices=HOTSPOT_ORDERS, default=None,
                        help="rank hotspots by recoverable time (headroom, the default) or "
                             "by time")
    parser.add_argument("--format", dest="fmt", choices=FORMAT_CHOICES, default="table",
                        help="table format (default: table, plain text); csv and json "
                             "write the raw numbers alone to standard output")
    parser.add_argument("--top", "-n", dest="n", type=at_least(1), default=None, metavar="N",
                        help="rows to show (default: the top 10 hotspots and findings; all rows of "
                             "the other tables)")
    parser.add_argument("--depth", type=at_least(0), default=None, metavar="D",
                        help="deepest module level in the module table (root = 0); "
                             "the scaling plot uses D or 1")
    parser.add_argument("--no-fold", dest="fold", action="store_false",
                        help="one row per block of a repeated structure (layers.0, layers.1, "
                             "...) instead of one row for all of them")
    parser.add_argument("--findings", action="store_true",
                        help="print the findings under the table: the cause, the fix and the "
                             "time it recovers (--by finding makes them the table)")


def settle_table_options(args: argparse.Namespace) -> None:
    """Resolve ``--by`` and ``--sort`` into ``args.table`` (a kind of table), ``args.order``
    (the hotspot order) and ``args.fmt`` (a tabulate format).

    Raises:
        UsageError: ``--sort`` comes with a table that is not the hotspots.
    """
    by = getattr(args, "by", None)
    order = getattr(args, "sort", None)
    args.table = GROUPINGS[by] if by is not None else "hotspots"
    if order is not None and args.table != "hotspots":
        raise UsageError(f"--sort ranks hotspots; the {args.table} table has its own order")
    args.order = order or "headroom"
    args.fmt = "plain" if args.fmt == "table" else args.fmt


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add the ``report`` subcommand to the top-level ``subparsers``; return its parser."""
    parser = subparsers.add_parser(
        "report", help="print tables and draw plots from .ncu-rep reports",
        description="Read Nsight Compute reports (.ncu-rep, .ncu-rep.xz) or profiles saved "
        "by Profile.save (.parquet), print a table, and optionally write tables and plots.")
    parser.add_argument("reports", nargs="+", type=Path, metavar="REPORT",
                        help="reports (.ncu-rep, .ncu-rep.xz), saved profiles (.parquet), a "
                             "sweep's output directory or a folder of reports")
    add_table_options(parser)
    for kind in TABLE_OUTPUTS:
        parser.add_argument(f"--{kind}", type=Path, default=None, metavar="OUT",
                            help=f"also write the table, raw numbers, to OUT as {kind}")
    parser.add_argument("--plot", dest="roofline", type=Path, default=None,
                        metavar="PNG", help="draw the roofline to PNG (or .svg)")
    parser.add_argument("--shape", default=None,
                        help="the shape drawn on the roofline (default: every shape)")
    parser.add_argument("--plot-scaling", dest="scaling", type=Path,
                        default=None, metavar="PNG",
                        help="draw time per module vs shape to PNG (or .svg)")
    parser.add_argument("--label", action="append", default=None, metavar="LABEL",
                        help="a label per REPORT, in order (repeat it): names reports of "
                             "different shapes or runs; reports given the same label are "
                             "averaged as runs of one thing")
    add_force(parser)
    return parser


def read_profile(paths: Sequence[Path], labels: Sequence[str] | None = None) -> Profile:
    """Load reports, saved profiles and sweep directories into one profile
    (:func:`torch_nsight.load`: its registry decides how each path is read).

    Args:
        paths: ``.ncu-rep``/``.ncu-rep.xz`` reports, ``.parquet`` profiles, sweep output
            directories, folders of reports.
        labels: one label per path (``--label``), or None.

    Returns:
        The profile.

    Raises:
        ReportError: a path is missing, unreadable or not a source torch_nsight reads.
        UsageError: labels were given for a folder of reports.
    """
    from torch_nsight.loading import load

    try:
        return load(paths, labels=labels)
    except ValueError as err:  # the labels do not fit the paths: the user's to fix
        if labels is None:
            raise
        raise UsageError(f"--label: {err}") from err


def outputs(args: argparse.Namespace) -> list[Path | None]:
    """Return every file the options ask for, to check them before any work."""
    return [getattr(args, kind, None) for kind in (*TABLE_OUTPUTS, "roofline", "scaling")]


def describe(profile: Profile) -> str:
    """Return a one-line summary: GPU, kernel count, shapes, variants, coverage (names from
    the files escaped)."""
    from torch_nsight.render.readable_numbers import printable

    return printable(profile.describe())


def check_shape(profile: Profile, shape: str | None) -> None:
    """Refuse a ``--shape`` that the profile does not hold.

    Args:
        profile: the profile.
        shape: the shape asked for, or None.

    Raises:
        UsageError: ``shape`` is not one of the profile's shapes.
    """
    if shape is None:
        return
    shapes = [str(s) for s in dict.fromkeys(profile.kernels["shape"].dropna())]
    if shape not in shapes:
        raise UsageError(f"--shape {shape} is not in the profile; it holds: "
                         f"{', '.join(shapes) or 'no labelled shapes'}")


def emit(profile: Profile, args: argparse.Namespace, stream: TextIO | None = None) -> None:
    """Print the chosen table and write every requested file.

    Args:
        profile: the profile.
        args: parsed options (see :func:`add_table_options`; output paths optional).
        stream: where the table goes; None: standard output.

    Raises:
        UsageError: ``--shape`` is not in the profile.
        OutputWriteError: a file cannot be written.
    """
    from torch_nsight.render import render_table, write_table

    stream = stream if stream is not None else sys.stdout
    if not hasattr(args, "order"):
        settle_table_options(args)
    check_shape(profile, getattr(args, "shape", None))
    if args.table == "ranks":
        from torch_nsight.analyze import has_ranks

        if not has_ranks(profile.kernels):
            raise UsageError("--by rank needs reports of distributed ranks: load the "
                             "report-rank<R>.ncu-rep files that `torch-nsight profile --ranks` "
                             "writes")
    if getattr(args, "roofline", None) is not None:  # refuse before printing anything
        from torch_nsight.render.roofline_plot import raise_unplaceable

        raise_unplaceable(profile)
    if args.fmt in DATA_FORMATS:  # the table alone, raw numbers, for a pipe
        from torch_nsight.render import table_frame
        from torch_nsight.render.table_output import frame_text

        frame = table_frame(profile, args.table, n=args.n, order=args.order, depth=args.depth,
                            fold=getattr(args, "fold", True))
        say(describe(profile), sys.stderr)
        stream.write(frame_text(frame, args.fmt))
    else:
        table = render_table(profile, args.table, args.fmt, args.n, order=args.order,
                             depth=args.depth, fold=getattr(args, "fold", True))
        if args.fmt == "markdown":
            print(describe(profile), file=stream)
        else:
            say(describe(profile), stream)
        print(file=stream)
        print(table, file=stream)
        if profile.timeline is not None:
            from torch_nsight.render.verdict import render_verdicts

            print(file=stream)
            print(render_verdicts(profile, args.fmt), file=stream)
        if getattr(args, "findings", False) and args.table != "findings":
            _print_findings(profile, args, stream)
    written = []
    for kind in TABLE_OUTPUTS:
        target = getattr(args, kind, None)
        if target is not None:
            with writing(target):
                written.append(write_table(profile, target, args.table, args.n, order=args.order,
                                           depth=args.depth, fold=getattr(args, "fold", True)))
    if getattr(args, "roofline", None) is not None:
        from torch_nsight.render import plot_roofline

        with writing(args.roofline):
            plot_roofline(profile, args.roofline, shape=getattr(args, "shape", None))
        written.append(args.roofline)
    if getattr(args, "scaling", None) is not None:
        from torch_nsight.render import plot_scaling

        with writing(args.scaling):
            plot_scaling(profile, args.scaling,
                         depth=args.depth if args.depth is not None else 1)
        written.append(args.scaling)
    for path in written:  # beside csv/json on standard output, they go to standard error
        say(f"wrote {path}", sys.stderr if args.fmt in DATA_FORMATS else stream)


def check_arguments(args: argparse.Namespace) -> None:
    """Check the options of ``report`` before any work: suffixes, ``--shape``, outputs.

    Args:
        args: the parsed options.

    Raises:
        UsageError: a table output has the wrong suffix, ``--shape`` comes without
            ``--plot``, ``--by`` and ``--sort`` disagree, or an output's folder is missing.
        OutputExistsError: an output exists and ``--force`` was not given.
    """
    settle_table_options(args)
    for kind in TABLE_OUTPUTS:
        target = getattr(args, kind)
        if target is not None and target.suffix.lower() != f".{kind}":
            raise UsageError(f"--{kind} needs a file ending in .{kind}, got {target}")
    for option in ("roofline", "scaling"):
        target = getattr(args, option)
        if target is not None and target.suffix.lower() not in (".png", ".svg"):
            flag = {"roofline": "--plot", "scaling": "--plot-scaling"}[option]
            raise UsageError(f"{flag} needs a file ending in .png or .svg, got {target}")
    if args.label is not None and len(args.label) != len(args.reports):
        raise UsageError(f"--label was given {len(args.label)} time(s) for "
                         f"{len(args.reports)} report(s): give one label per report")
    if args.shape is not None and args.roofline is None:
        raise UsageError("--shape picks the shape drawn by --plot; pass --plot too")
    check_outputs(outputs(args), args.force, inputs=args.reports)


def run(args: argparse.Namespace) -> int:
    """Run ``torch-nsight report``.

    Args:
        args: the parsed options.

    Returns:
        0.

    Raises:
        TorchNsightError: a report is unreadable (``ReportError``), an option is refused
            (:class:`~torch_nsight.cli.outputs.UsageError`), an output exists without
            ``--force`` or cannot be written.
    """
    check_arguments(args)
    profile = read_profile(args.reports, args.label)
    say_missing_metrics(profile)
    emit(profile, args)
    return 0


def say_missing_metrics(profile: Profile, stream: TextIO | None = None) -> None:
    """Name, on standard error, the metrics a source lacks and how to collect them (and that
    several ranks are averaged)."""
    from torch_nsight.analyze.spread import STABLE_CI_PCT, runs_and_ranks

    stream = stream if stream is not None else sys.stderr

    def note(text: str) -> None:
        say(f"note: {text}", stream)
    most, ranks = runs_and_ranks(profile.kernels)
    if most > 1:
        note(f"times are means over {most} runs, ± the half-width of their 95% confidence "
             f"interval (column ci95_ns; stable when within {STABLE_CI_PCT:g}% of the mean)")
    if ranks > 1:
        note(f"the rows average {ranks} ranks, with no ± over them (ranks differ by their "
             "role, one waiting for another, not by noise); --by rank compares them")
    for source in profile.meta.sources:
        if source.metric_set == "duration":
            note(f"{Path(source.path).name} holds kernel times only (--metric-set "
                  "duration): no roofline, bound or headroom")
        elif source.metric_set in ("fast", "lean"):
            flops = ("FLOPs counted from the calls table (flops_basis 'calls'), "
                     if source.metric_set == "fast" else "")
            bounds = ("bounds from four one-pass busy counters that stand in for Nsight "
                      "Compute's speed-of-light data (basis 'sol_estimate'; --metric-set "
                      "roofline measures them)"
                      if "sol_estimate" in profile.basis_counts else
                      "bounds read from the roofline alone, without Nsight Compute's "
                      "speed-of-light data (--metric-set roofline measures it)")
            note(f"{Path(source.path).name} was recorded with the {source.metric_set} "
                  f"metric set: {flops}{bounds}")
        elif source.missing_metrics:
            shown = ", ".join(source.missing_metrics[:4])
            more = len(source.missing_metrics) - 4
            note(f"{Path(source.path).name} lacks {len(source.missing_metrics)} of the "
                  f"metrics torch_nsight reads ({shown}{f' and {more} more' if more > 0 else ''})"
                  ": the columns they feed are blank. Record with `torch-nsight profile -- "
                  "COMMAND`; `torch-nsight profile --dry-run -- COMMAND` prints the ncu flags.")


def _findings(profile: Any, args: argparse.Namespace) -> Any:
    """The profile's finding table, worded (render's words imported here, not at start-up)."""
    import torch_nsight.render.finding_words  # noqa: F401 - registers the words

    return profile.finding_table(fold=getattr(args, "fold", True))


def _print_findings(profile: Any, args: argparse.Namespace, stream: TextIO) -> None:
    """The findings table under the report, and the section of changes under it."""
    from torch_nsight.render.findings import render_findings

    found = _findings(profile, args)
    print(file=stream)
    print(render_findings(found.head(args.n or 10), args.fmt, profile.kernels), file=stream)
    print_changes(found, profile.kernels, args.fmt, stream)


def print_changes(found: Any, kernels: Any, fmt: str, stream: Any = None) -> None:
    """Under the findings table: the whole finding table gathered by change, where a change
    gathers several findings (:func:`~torch_nsight.render.changes.render_changes`)."""
    if fmt in ("csv", "json"):
        return
    from torch_nsight.analyze.findings.by_change import by_change
    from torch_nsight.render.changes import render_changes
    from torch_nsight.render.readable_numbers import printable

    text = render_changes(by_change(found, kernels), fmt)
    if text:
        print("\n" + "\n".join(printable(line) for line in text.splitlines()),
              file=stream or sys.stdout)
