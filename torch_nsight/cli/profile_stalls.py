"""``torch-nsight profile --stalls``: the option, its checks, its dry run and its report on
standard error (the pass itself: :mod:`torch_nsight.collect.parent.stall_pass`)."""

from __future__ import annotations

import argparse
import logging
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from torch_nsight.cli.outputs import UsageError
from torch_nsight.cli.text import say, say_comment, shell_command
from torch_nsight.formats import stall_report_of
from torch_nsight.units import counted

if TYPE_CHECKING:
    from torch_nsight.collect.parent.script import ScriptPlan, ScriptRun
    from torch_nsight.profile import Profile

logger = logging.getLogger(__name__)

STALLS_HELP = (
    "after the first pass, run the command a second time under ncu on only the kernels "
    "holding most of the latency-bound time (80%%, at most 20 names; same steps), collecting "
    "achieved occupancy, eligible warps per scheduler and the warp stall reasons: each "
    "latency-bound kernel then names its cause (memory latency, barriers, instruction issue, "
    "a small grid, launch overhead ...). Off by default: it starts the script a second time "
    "and replays each of those kernels 8 times")


def add_stalls_option(parser: argparse.ArgumentParser) -> None:
    """Add ``--stalls`` to ``profile``'s parser."""
    parser.add_argument("--stalls", action="store_true", help=STALLS_HELP)


def check_stalls(args: argparse.Namespace, world_size: int) -> None:
    """Refuse ``--stalls`` where a second pass cannot match the first.

    Raises:
        UsageError: without ``--steps``, with ``--timeline``, in a run of several ranks, or
            with launch filters that would shift the launches' order (``--launch-skip``,
            ``--launch-count``, ncu's own in ``--ncu-arg``).
    """
    if not getattr(args, "stalls", False):
        return
    if args.timeline:
        raise UsageError("--stalls is a second pass under ncu: it does not go with --timeline")
    if args.steps is None:
        raise UsageError("--stalls matches the second pass's kernels to the first's within "
                         "the chosen steps: pass --steps A:B (and mark the loop with "
                         "torch_nsight.step())")
    if args.ranks is not None or world_size > 1:
        raise UsageError("--stalls runs the command a second time, which a run of several "
                         "ranks cannot do alone: profile one process, or leave --stalls out")
    skipping = [option for option, value in (("--launch-skip", args.launch_skip),
                                             ("--launch-count", args.launch_count))
                if value is not None]
    skipping += [arg for arg in args.ncu_arg or ()
                 if arg.split("=")[0] in ("-k", "--kernel-name", "-s", "--launch-skip", "-c",
                                          "--launch-count", "--kernel-id")]
    if skipping:
        raise UsageError(f"--stalls matches launches by their order within the chosen steps, "
                         f"which {', '.join(skipping)} would shift: leave them out")


def forget_old_pass(report: Path) -> None:
    """Remove a second pass left beside ``report`` by an earlier run: the first pass about to
    be written would otherwise be merged with it."""
    second = stall_report_of(report)
    for path in (second, second.with_name(second.name + ".xz"),
                 second.with_suffix(".log"), second.with_suffix(".run.json")):
        path.unlink(missing_ok=True)


def show_dry_run(first: ScriptPlan, ncu: str, ncu_args: Sequence[str]) -> None:
    """Print the second pass's ncu command, the names left as a placeholder."""
    from torch_nsight.analyze.stalls import TARGET_COVER_PCT, TARGET_NAMES
    from torch_nsight.collect.parent.stall_pass import NAMES_PLACEHOLDER, plan_stall_pass

    plan = plan_stall_pass(first, [NAMES_PLACEHOLDER], ncu=ncu, ncu_args=ncu_args)
    say_comment(f"# then the second pass (--stalls), {NAMES_PLACEHOLDER} = the kernel names "
                f"holding {TARGET_COVER_PCT:.0f}% of the first pass's latency-bound time (at "
                f"most {TARGET_NAMES}):")
    shown = [f"{k}={shlex.quote(v)}" for k, v in plan.script.shown().items()]
    print(shell_command(plan.ncu_command, quoted=shown))
    say_comment(f"# metrics ({plan.metric_set}): " + ", ".join(plan.metrics))


#: The fewest seconds of ``--timeout`` left for the second pass to be started at all.
MIN_PASS_S = 5.0


def second_pass(first: ScriptPlan, ran: ScriptRun, *, ncu: str, ncu_args: Sequence[str],
                known: frozenset[str] | None, timeout: float | None) -> Profile:
    """Run the second pass after a first that ended well, in what is left of ``timeout``
    (the first run's phases spent); say how it went on standard error; return the profile to
    show (the first's, merged where the second ran)."""
    import dataclasses

    from torch_nsight.collect.parent.stall_pass import run_stall_pass

    profile = ran.profile
    if ran.exit_status != 0:
        logger.warning("the command failed (exit status %d): no second pass (--stalls)",
                       ran.exit_status)
        return profile
    if timeout is not None:
        left = timeout - sum((ran.record.get("phases_s") or {}).values())
        if left < MIN_PASS_S:
            logger.warning("--timeout %g s is spent (%.0f s left): no second pass (--stalls)",
                           timeout, max(left, 0.0))
            return profile
        first = dataclasses.replace(first, timeout=left)
    done = run_stall_pass(first, profile, ncu=ncu, ncu_args=ncu_args, known=known)
    if done.failed is not None and not done.merged:
        logger.warning("the second pass (--stalls) gave nothing (%s): the first pass's "
                       "results are shown", done.failed)
        return done.profile
    say(f"second pass (--stalls): {len(done.functions)} kernel names, "
        f"{counted(done.kernels_profiled, 'kernel')} profiled in {done.seconds:.1f} s; stall reasons on "
        f"{done.merged} kernel rows ({stall_report_of(first.report)})", sys.stderr)
    return done.profile
