"""``torch-nsight report``: tables and plots from ``.ncu-rep`` reports or saved profiles."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from torch_nsight.cli.outputs import add_force, check_outputs

if TYPE_CHECKING:
    from torch_nsight.profile import Profile

logger = logging.getLogger(__name__)

FORMAT_CHOICES = ("plain", "github", "markdown", "simple", "grid", "rst")
TABLE_OUTPUTS = ("csv", "parquet", "json")


def add_table_options(parser: argparse.ArgumentParser) -> None:
    """Add the options that choose and shape the printed table.

    Args:
        parser: a subcommand's parser.
    """
    parser.add_argument("--table", choices=("hotspots", "modules", "kernels"),
                        default="hotspots", help="what to print (default: hotspots)")
    parser.add_argument("--format", dest="fmt", choices=FORMAT_CHOICES, default="plain",
                        help="table format (default: plain)")
    parser.add_argument("-n", type=int, default=None, metavar="N",
                        help="rows to show (default: 10 hotspots, every module or kernel)")
    parser.add_argument("--by", choices=("headroom", "time"), default="headroom",
                        help="rank hotspots by recoverable time or by time "
                             "(default: headroom)")
    parser.add_argument("--depth", type=int, default=None, metavar="D",
                        help="deepest module level in the modules table (root = 0); "
                             "the scaling plot uses D or 1")


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add the ``report`` subcommand.

    Args:
        subparsers: the top-level parser's subparsers.

    Returns:
        The subcommand's parser.
    """
    parser = subparsers.add_parser(
        "report", help="print tables and draw plots from .ncu-rep reports",
        description="Read Nsight Compute reports (.ncu-rep, .ncu-rep.xz) or profiles saved "
        "by Profile.save (.parquet), print a table, and optionally write tables and plots.")
    parser.add_argument("reports", nargs="+", type=Path, metavar="REPORT",
                        help="one .ncu-rep / .ncu-rep.xz per shape or run, or .parquet")
    add_table_options(parser)
    for kind in TABLE_OUTPUTS:
        parser.add_argument(f"--{kind}", type=Path, default=None, metavar="OUT",
                            help=f"also write the table, raw numbers, to OUT as {kind}")
    parser.add_argument("--roofline", type=Path, default=None, metavar="PNG",
                        help="draw the roofline to PNG (or .svg)")
    parser.add_argument("--shape", default=None,
                        help="the shape drawn on the roofline (default: every shape)")
    parser.add_argument("--scaling", type=Path, default=None, metavar="PNG",
                        help="draw time per module vs shape to PNG (or .svg)")
    add_force(parser)
    return parser


def read_profile(paths: Sequence[Path]) -> Profile:
    """Load reports and saved profiles into one profile.

    Args:
        paths: ``.ncu-rep``/``.ncu-rep.xz`` reports and ``.parquet`` profiles.

    Returns:
        The profile.

    Raises:
        ReportError: a file is missing or unreadable.
    """
    from torch_nsight.profile import Profile, load

    saved = [p for p in paths if p.suffix.lower() == ".parquet"]
    reports = [p for p in paths if p.suffix.lower() != ".parquet"]
    profiles = [Profile.read(p) for p in saved]
    if reports:
        profiles.append(load(reports))
    return profiles[0] if len(profiles) == 1 else Profile.concat(profiles)


def outputs(args: argparse.Namespace) -> list[Path | None]:
    """Return every file the options ask for, to check them before any work."""
    return [getattr(args, kind, None) for kind in (*TABLE_OUTPUTS, "roofline", "scaling")]


def describe(profile: Profile) -> str:
    """Return a one-line summary: GPU, kernel count, shapes, variants, coverage."""
    meta = profile.meta
    shapes = ", ".join(map(str, meta.get("shapes") or [])) or "unlabelled"
    variants = ", ".join(map(str, meta.get("variants") or []))
    coverage = profile.coverage
    return (f"{meta.get('gpu') or 'unknown GPU'}: {len(profile.kernels)} kernels, shapes "
            f"{shapes}" + (f", variants {variants}" if variants else "")
            + (f"; {100 * coverage:.0f}% of GPU time inside module ranges"
               if coverage == coverage else ""))


def emit(profile: Profile, args: argparse.Namespace, stream: TextIO | None = None) -> None:
    """Print the chosen table and write every requested file.

    Args:
        profile: the profile.
        args: parsed options (see :func:`add_table_options`; output paths optional).
        stream: where the table goes; None: standard output.

    Raises:
        ValueError: an option is out of range.
        OSError: a file cannot be written.
    """
    from torch_nsight.render import plot_roofline, plot_scaling, render_table, write_table

    stream = stream if stream is not None else sys.stdout
    table = render_table(profile, args.table, args.fmt, args.n, by=args.by, depth=args.depth)
    print(describe(profile), file=stream)
    print(file=stream)
    print(table, file=stream)
    written = []
    for kind in TABLE_OUTPUTS:
        target = getattr(args, kind, None)
        if target is not None:
            written.append(write_table(profile, target, args.table, args.n, by=args.by,
                                       depth=args.depth))
    if getattr(args, "roofline", None) is not None:
        plot_roofline(profile, args.roofline, shape=getattr(args, "shape", None))
        written.append(args.roofline)
    if getattr(args, "scaling", None) is not None:
        plot_scaling(profile, args.scaling, depth=args.depth if args.depth is not None else 1)
        written.append(args.scaling)
    for path in written:
        print(f"wrote {path}", file=stream)


def run(args: argparse.Namespace) -> int:
    """Run ``torch-nsight report``.

    Args:
        args: the parsed options.

    Returns:
        0.

    Raises:
        TorchNsightError: a report is unreadable, or an output exists without ``--force``.
        ValueError: an option is out of range.
        OSError: a file cannot be written.
    """
    for kind in TABLE_OUTPUTS:
        target = getattr(args, kind)
        if target is not None and target.suffix.lower() != f".{kind}":
            raise ValueError(f"--{kind} needs a file ending in .{kind}, got {target}")
    check_outputs(outputs(args), args.force)
    profile = read_profile(args.reports)
    emit(profile, args)
    return 0
