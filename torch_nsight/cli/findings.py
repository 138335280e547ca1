"""``torch-nsight findings REPORT... [--benchmark | --verify --command CMD --steps A:B]``:
what to change, and the time it recovers.

Reads what ``report`` reads and prints :meth:`torch_nsight.Profile.findings`, ranked by the
time each fix recovers. ``--benchmark`` times the fix of the top findings on this machine's
GPU on fresh tensors (the padded GEMM, the TF32 GEMM, the channels-last convolution,
rebuilt from the calls table; see :mod:`torch_nsight.collect.benchmark_fixes`) and replaces their
estimate by the measurement. ``--verify --command "python train.py" --steps A:B`` measures
the top findings' switch fixes on the script's own steps instead, as ``profile --verify``
does (:mod:`torch_nsight.cli.verify`): to verify is always to time the user's script.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from torch_nsight.cli.arguments import accept_dashed_values, read_steps
from torch_nsight.cli.outputs import UsageError
from torch_nsight.cli.report import print_changes
from torch_nsight.cli.text import say
from torch_nsight.cli.verify import (
    add_verify_options,
    print_verified,
    run_verify,
    verify_options_given,
    verify_plan,
)
from torch_nsight.render.readable_numbers import printable


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add the ``findings`` subcommand to the top-level ``subparsers``; return its parser."""
    parser = subparsers.add_parser(
        "findings", help="the fixes worth making, each with the time it recovers",
        description="The fixes worth making, each with the time it recovers, for anything "
                    "`report` reads; --benchmark times the top fixes on this GPU, --verify "
                    "on your script's own steps.")
    accept_dashed_values(parser)  # --steps -1:2 is refused by read_steps, in one line
    parser.add_argument("reports", nargs="+", type=Path, metavar="REPORT",
                        help="what `report` reads: reports, saved profiles, sweep or "
                             "timeline directories, traces")
    parser.add_argument("--top", "-n", dest="n", type=int, default=10, metavar="N",
                        help="findings to show (default 10)")
    parser.add_argument("--format", dest="fmt", choices=("table", "markdown", "csv", "json"),
                        default="table", help="table (default), markdown for a pull request, "
                                              "or csv/json with every column")
    parser.add_argument("--benchmark", action="store_true",
                        help="time the fix of the top GEMM and convolution findings on this "
                             "GPU, on fresh tensors of the recorded shapes (CUDA events), and "
                             "report the measured gain")
    parser.add_argument("--verify", action="store_true",
                        help="time the findings' switch fixes on your script's own steps "
                             "(needs --command and --steps)")
    parser.add_argument("--command", default=None, metavar="CMD",
                        help="with --verify: the script that made the report, one quoted "
                             "command (\"python train.py --lr 3e-4\")")
    parser.add_argument("--steps", default=None, metavar="A:B",
                        help="with --command: the steps to time (the steps before A warm up)")
    add_verify_options(parser, flag=False)
    parser.add_argument("--no-fold", dest="fold", action="store_false",
                        help="one row per block of a repeated structure instead of one row "
                             "for all of them")
    parser.add_argument("--label", action="append", default=None, metavar="LABEL",
                        help="a label per REPORT, in order (as for report)")
    return parser


def run(args: argparse.Namespace) -> int:
    """Run ``torch-nsight findings``.

    Returns:
        0.

    Raises:
        TorchNsightError: a report is unreadable, or --benchmark or --verify without a
            GPU.
    """
    from torch_nsight.cli.report import read_profile, say_missing_metrics
    from torch_nsight.render.findings import render_findings

    if args.n < 1:
        raise UsageError(f"--top must be at least 1, got {args.n}")
    if args.label is not None and len(args.label) != len(args.reports):
        raise UsageError(f"--label was given {len(args.label)} time(s) for "
                         f"{len(args.reports)} report(s): give one label per report")
    if args.command is not None and not args.verify:
        raise UsageError("--command is the script --verify times its fixes on: add --verify")
    if args.verify and args.command is None:
        raise UsageError("--verify times fixes on your script's own steps: add --command "
                         "\"python train.py\" --steps A:B (--benchmark times them on fresh "
                         "tensors instead)")
    if args.verify and args.benchmark:
        raise UsageError("--benchmark times fixes on fresh tensors, --verify on your script: "
                         "give one")
    on_steps = [*(["--steps"] if args.steps is not None else []),
                *verify_options_given(args)]
    if on_steps and args.command is None:
        raise UsageError(f"{', '.join(on_steps)} time fixes on your own steps: add --verify "
                         "--command \"python train.py\"")
    profile = read_profile(args.reports, args.label)
    say_missing_metrics(profile)
    if args.verify:
        plan = verify_plan(args, _command(args.command), read_steps(args.steps, "--steps"))
        say(profile.describe())
        import torch_nsight.render.finding_words  # noqa: F401 - the words
        print_verified(run_verify(profile.finding_table(fold=args.fold), plan),
                       profile.kernels, args.n, args.fmt)
        return 0
    if args.benchmark:
        import torch_nsight.render.finding_words  # noqa: F401 - the words
        from torch_nsight.collect.benchmark_fixes import benchmark_findings

        found = benchmark_findings(profile, top=args.n)
        if args.fold:  # as the profile's own rows fold: blocks that launched the same kernels
            from torch_nsight.analyze import fold_findings

            found = fold_findings(found, profile.kernels)
    else:
        import torch_nsight.render.finding_words  # noqa: F401 - the words
        found = profile.finding_table(fold=args.fold)
    everything, found = found, found.head(args.n)
    if args.fmt in ("csv", "json"):
        from torch_nsight.render.table_output import frame_text

        say(profile.describe(), sys.stderr)
        sys.stdout.write(frame_text(found, args.fmt))
        return 0
    if args.fmt == "markdown":
        print(printable(profile.describe()))
    else:
        say(profile.describe())
    print()
    print(render_findings(found, "markdown" if args.fmt == "markdown" else "plain",
                          profile.kernels))
    print_changes(everything, profile.kernels, args.fmt)
    if args.benchmark:
        from torch_nsight.render.findings import benchmark_lines

        lines = benchmark_lines(found, everything)
        if lines:
            print("\n" + "\n".join(printable(line) for line in lines))
    return 0


def _command(given: str) -> list[str]:
    """``--command``'s words, as a shell splits them.

    Raises:
        UsageError: they do not split (an open quote), or there are none.
    """
    import shlex

    try:
        command = shlex.split(given)
    except ValueError as err:
        raise UsageError(f"--command {given!r}: {err}") from None
    if not command:
        raise UsageError("--command is empty: give the command that made the report, e.g. "
                         "--command \"python train.py\"")
    return command
