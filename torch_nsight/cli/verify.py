"""``--verify`` on the user's own steps: the options ``profile`` (and ``findings`` given a
command) share, and the table they print.

After the profile, the command runs bare (no ncu, no hooks) once for each of the top
findings' switch fixes, the fix switched off and on in turn at every step
(:mod:`torch_nsight.collect.parent.measure`); the gain is the median difference of adjacent
steps without and with it. The findings table then shows the measured gain beside the
predicted one, and a line per fix the sum of its rows' predictions beside what it measured,
over how many pairs of steps.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from torch_nsight.cli.arguments import read_steps
from torch_nsight.cli.command_check import cannot_start
from torch_nsight.cli.outputs import UsageError
from torch_nsight.cli.text import say, say_comment
from torch_nsight.render.readable_numbers import printable
from torch_nsight.verify_exchange import FIX_OPTIONS, FixSpec, parse_fixes

if TYPE_CHECKING:
    import pandas as pd

    from torch_nsight.collect.parent.measure import VerifyPlan
    from torch_nsight.environment import Steps
    from torch_nsight.profile import Profile

__all__ = ["add_verify_options", "print_verified", "verify_plan", "run_verify",
           "verified_lines", "verify_named_fixes", "verify_options_given",
           "check_verify_options", "verify_profile"]


def add_verify_options(parser: argparse.ArgumentParser, *, flag: bool = True) -> None:
    """Add ``--verify`` (when ``flag``) and its ``--verify-*`` options."""
    if flag:
        parser.add_argument("--verify", action="store_true",
                            help="after the profile, run the command bare once for each "
                                 "of the top findings' switch fixes (torch.compile, "
                                 "channels-last, TF32, cudnn.benchmark, a fused optimizer, a "
                                 "padded Linear), the fix switched off "
                                 "and on at every step, and show the gain measured on your "
                                 "steps beside the predicted one (rounds x N more runs of "
                                 "the command)")
    parser.add_argument("--verify-top", type=int, default=None, metavar="N",
                        help="measure the switches of the top N findings that have one "
                             "(default 3)")
    parser.add_argument("--verify-steps", default=None, metavar="A:B",
                        help="the steps each bare run times, the fix off and on in turn "
                             "(at least 10, after at least 2; default: --steps, lengthened "
                             "to 20 steps, 10 pairs; the steps before A warm up)")
    parser.add_argument("--verify-fix", action="append", default=[], metavar="FIX",
                        help="measure this fix instead of the findings' (repeat for several): "
                             f"KIND[@MODULE][:KEY=VALUE,...], KIND one of "
                             f"{', '.join(FIX_OPTIONS)} (e.g. "
                             "pad_linear@lm_head:multiple=64, compile:mode=reduce-overhead)")
    parser.add_argument("--verify-rounds", type=int, default=None, metavar="R",
                        help="run each fix in this many processes and pool their pairs of "
                             "steps (default 1)")
    parser.add_argument("--verify-loss-tolerance", type=float, default=None, metavar="X",
                        help="a fix that changes the loss (step.record_loss) by more than "
                             "this fraction, from the adjacent steps without it, is not "
                             "counted (default 0.02)")


def verify_options_given(args: argparse.Namespace) -> list[str]:
    """The ``--verify-*`` options given on the command line, by their spelling."""
    return [option for option, given in (
        ("--verify-top", args.verify_top is not None),
        ("--verify-steps", args.verify_steps is not None), ("--verify-fix", args.verify_fix),
        ("--verify-loss-tolerance", args.verify_loss_tolerance is not None),
        ("--verify-rounds", args.verify_rounds is not None)) if given]


def check_verify_options(args: argparse.Namespace) -> None:
    """Refuse ``--verify-*`` options without ``--verify``: they would be ignored, and the
    fix named by ``--verify-fix`` never timed (they do not imply ``--verify``, which runs
    the command again once per fix: that is asked for, never assumed).

    Raises:
        UsageError: one was given without ``--verify``.
    """
    given = verify_options_given(args)
    if given and not args.verify:
        raise UsageError(f"{', '.join(given)} {'tunes' if len(given) == 1 else 'tune'} "
                         "--verify, which was not given: add --verify (it runs the command "
                         "again, bare, once per fix)")


def verify_plan(args: argparse.Namespace, command: Sequence[str], steps: Steps | None
                ) -> VerifyPlan:
    """The checked plan of ``--verify`` from the options (``steps``: the command's
    ``--steps``, read).

    Raises:
        UsageError: a bad option (one line, naming it).
        VerifyError: no steps to time, or too few.
    """
    from torch_nsight.analyze.measured import LOSS_TOLERANCE
    from torch_nsight.collect.parent.measure import (
        DEFAULT_ROUNDS,
        DEFAULT_TOP,
        VerifyPlan,
        verify_window,
    )

    if getattr(args, "ranks", None) is not None or getattr(args, "timeline", False):
        raise UsageError("--verify runs the whole command again, bare: not with --ranks "
                         "(run `torch-nsight profile --verify -- torchrun ...` instead) nor "
                         "--timeline")
    top = DEFAULT_TOP if args.verify_top is None else args.verify_top
    if top < 1:
        raise UsageError(f"--verify-top must be at least 1, got {top}")
    rounds = DEFAULT_ROUNDS if args.verify_rounds is None else args.verify_rounds
    if rounds < 1:
        raise UsageError(f"--verify-rounds must be at least 1, got {rounds}")
    tolerance = (LOSS_TOLERANCE if args.verify_loss_tolerance is None
                 else args.verify_loss_tolerance)
    if not tolerance >= 0:
        raise UsageError(f"--verify-loss-tolerance must be >= 0, got {tolerance}")
    fixes: list[FixSpec] = []
    for text in args.verify_fix:
        try:
            fixes += parse_fixes(text)
        except ValueError as err:
            raise UsageError(f"--verify-fix {text!r}: {err}") from None
    window = verify_window(steps, read_steps(args.verify_steps, "--verify-steps"))
    return VerifyPlan(list(command), window, top=top,
                      fixes=tuple(fixes), loss_tolerance=tolerance, rounds=rounds,
                      timeout=getattr(args, "timeout", None))


def run_verify(found: pd.DataFrame, plan: VerifyPlan,
               kernels: pd.DataFrame | None = None,
               calls: pd.DataFrame | None = None) -> pd.DataFrame:
    """Measure, with a progress line per run on standard error (``kernels``: the profile's,
    to judge the GPU's idle time in the bare step).

    Raises:
        UsageError: the command cannot be started.
        VerifyError: nothing to measure.
    """
    from torch_nsight.collect.parent.measure import verify_on_steps

    try:
        return verify_on_steps(found, plan, say=lambda line: say(line, sys.stderr),
                               kernels=kernels, calls=calls)
    except (FileNotFoundError, PermissionError) as err:
        raise cannot_start(plan.command, err) from None


def verify_profile(profile: Profile, args: argparse.Namespace, plan: VerifyPlan,
                   record: dict[str, Any]) -> None:
    """``profile --verify`` after the profile: its findings' switches measured and printed;
    the GPU's idle time in the bare step judged where the profile holds every kernel of its
    chosen steps (:func:`_left_out`; ``record``: the run's manifest)."""
    import torch_nsight.render.finding_words  # noqa: F401 - the words

    left_out = _left_out(args, record)
    if left_out is not None:
        say(f"verify: the profile leaves out kernels of the step ({left_out}): the GPU's "
            "idle time in the bare step is not judged", sys.stderr)
    table = run_verify(profile.finding_table(fold=args.fold), plan,
                       None if left_out is not None else profile.kernels, profile.calls)
    print_verified(table, profile.kernels, args.n or 10, args.fmt)


def _left_out(args: argparse.Namespace, record: dict[str, Any]) -> str | None:
    """What makes the profile miss kernels of the chosen steps (no steps chosen, an option
    that filters the launches, NCCL left out, a chosen step that did not end), None where
    it holds them all: only then is the bare step's time beyond its kernels per step the
    GPU's idle time."""
    from torch_nsight.cli.profile_launches import launch_filters
    from torch_nsight.collect.parent import script

    given = launch_filters(args)
    if args.steps is None:
        return "no --steps: the whole run, not a step"
    if given:
        return given[0]
    if script.leaves_out_nccl(args.metric_set, os.environ):
        return "NCCL kernels"
    steps = record.get("steps_profiled") or []
    if not steps or any(step.get("status") != "ok" for step in steps):
        return "a chosen step did not end"
    return None


def print_verified(table: pd.DataFrame, kernels: pd.DataFrame | None, rows: int | None,
                   fmt: str = "plain") -> None:
    """The findings with the measured column, then one line per fix tried."""
    from torch_nsight.render.findings import render_findings

    tried = table["verify_status"].notna() & (table["verify_status"] != "no_switch")
    shown = table if rows is None else table[(table.index < rows) | tried]
    print()
    print(render_findings(shown.reset_index(drop=True),
                          "markdown" if fmt == "markdown" else "plain", kernels))
    print()
    for line in verified_lines(table[tried]):
        print(printable(line))


def verified_lines(tried: pd.DataFrame) -> list[str]:
    """One line per fix measured: its first finding, the other rows it stands for, the
    predicted gain of all of them beside the measured one (over how many pairs of steps),
    and the verdict."""
    import pandas as pd

    from torch_nsight.units import format_duration

    lines = []
    for _, rows in tried.groupby(tried["verify_fix"].fillna(""), sort=False):
        first = rows.iloc[0]
        others = f" (and {len(rows) - 1} more rows)" if len(rows) > 1 else ""
        head = (f"verified: {first['finding']} in {first['module']}{others}: "
                f"{first['verify_status']}: ")
        predicted = rows["est_gain_ns"].sum(min_count=1)
        bound = rows["gain_bound_ns"].sum(min_count=1) if "gain_bound_ns" in rows else None
        said = format_duration(predicted, largest="ms", decimals=2, missing="n/a")
        if pd.isna(predicted) and bound is not None and pd.notna(bound):
            said = f"at most {format_duration(bound, largest='ms', decimals=2)}"
        gain = first.get("measured_gain_ns")
        if first["verify_status"] == "measured" and pd.notna(gain):
            head += (f"{first['verify_fix']}: predicted {said}, "
                     f"measured {format_duration(gain, largest='ms', decimals=2)}"
                     f" over {int(first['steps_timed'])} pairs of steps"
                     + (f" ({gain / predicted:.2g}x the prediction)"
                        if pd.notna(predicted) and predicted > 0 else "")
                     + (", its mean above the bound on its kernels (the fix also removes "
                        "time no kernel holds: launches)"
                        if _above_bound(rows, predicted, bound) else "")
                     + "; ")
        lines.append(head + str(first["verify_detail"]))
    return lines


def _above_bound(rows: pd.DataFrame, predicted: float, bound: float | None) -> bool:
    """Whether a fix that also cuts launches measured, on average, more than its rows' bound
    on their kernels' time (predictions that are a bound only; whether that is beyond the
    noise is the verdict's own line)."""
    import pandas as pd

    from torch_nsight.analyze.findings.codes import CUTS_LAUNCHES

    gain = rows.iloc[0].get("measured_gain_ns")
    return (pd.isna(predicted) and bound is not None and pd.notna(bound)
            and bool(rows["fix_code"].isin(CUTS_LAUNCHES).any()) and pd.notna(gain)
            and gain > bound)


def verify_named_fixes(plan: VerifyPlan, fmt: str) -> None:
    """After a dry run (no profile, so no findings): measure the fixes ``--verify-fix``
    names, or say how to name them.

    Raises:
        UsageError, VerifyError: as :func:`run_verify`.
    """
    if not plan.fixes:
        say_comment("# --verify: a dry run has no findings to verify; name fixes to time on "
                    "your steps with --verify-fix")
        return
    import pandas as pd

    from torch_nsight.vocabulary import FINDING_COLUMNS

    print_verified(run_verify(pd.DataFrame(columns=list(FINDING_COLUMNS)), plan), None,
                   None, fmt)
