"""``torch-nsight profile [options] -- python train.py ARGS...``: your own script under ncu.

Runs the command under Nsight Compute with the flags torch_nsight needs (NVTX on, the
sweep's metric set; ``instrument()`` in the script sees the profiler by itself), writes the
report into ``--out``, then prints the hotspot table as ``report`` would.

* ``--steps 10:12``: only the steps the loop marks with ``torch_nsight.step()`` whose index
  is chosen (10 and 11) are profiled, backward included. Without the marker, ``--launch-skip``
  and ``--launch-count`` pass through to ncu.
* ``--ranks 0``: under ``torchrun --no-python``, each rank runs ``torch-nsight profile``; the
  chosen ranks (``RANK``, else ``LOCAL_RANK``) run under ncu, one report each
  (``report-rank0.ncu-rep``), the others run plainly. In a run of several processes, NCCL
  kernels are left out of replay (it would wait for peers forever) unless the metric set is
  the single-pass ``duration``, which times them and attributes them to modules.
* ``--timeline``: no ncu; the chosen steps are recorded by PyTorch's profiler (cheap: GPU
  idle, launch-bound steps, copies), and the verdict per step is printed.
* ``--stalls``: a second run of the command under ncu, on the same steps, profiling only
  the kernels that hold most of the latency-bound time for their warp stall reasons,
  achieved occupancy and eligible warps: each latency-bound kernel then names its cause.
  Off by default: it starts the command a second time (docs/findings.md gives the cost).
* ``--dry-run`` prints the command it would run and the metrics it collects; with
  ``--steps``, it also runs the command once without ncu (on the CPU too) until the chosen
  steps end, and says whether they ran, what ``instrument()`` recorded and which identical
  blocks would be profiled once: seconds, before a run under ncu that takes minutes.
* ``--verify``: then the top findings' switch fixes are measured on your own steps, the
  command run bare without and with each (:mod:`torch_nsight.cli.verify`).

The script's exit status is passed on; a partial report is kept and read.
"""

from __future__ import annotations

import argparse
import functools
import logging
import os
import shlex
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from torch_nsight.cli.arguments import accept_dashed_values, at_least, read_steps
from torch_nsight.cli.command_check import cannot_start, check_command
from torch_nsight.cli.outputs import (
    UsageError,
    add_force,
    check_out_files,
    check_out_folder,
    check_outputs,
    description,
)
from torch_nsight.cli.profile_launches import (
    add_replicate_option,
    check_launch_replication,
    launch_list_time,
    probes_launches,
    run_with_launches,
    say_launches_dry_run,
    say_replication_hint,
)
from torch_nsight.cli.profile_stalls import (
    add_stalls_option,
    check_stalls,
    forget_old_pass,
    second_pass,
    show_dry_run,
)
from torch_nsight.cli.rehearse import rehearse
from torch_nsight.cli.report import add_table_options, settle_table_options
from torch_nsight.cli.text import say, say_comment, shell_command
from torch_nsight.cli.verify import (
    add_verify_options,
    check_verify_options,
    verify_named_fixes,
    verify_plan,
    verify_profile,
)
from torch_nsight.environment import NCU_ENV, Steps
from torch_nsight.errors import NcuNotFoundError
from torch_nsight.files import locked_folder, rank_lock
from torch_nsight.formats import TIMELINE_MANIFEST, run_files
from torch_nsight.metrics import DEFAULT_PROFILE_METRIC_SET, METRIC_SETS
from torch_nsight.status import current_rank

if TYPE_CHECKING:
    from torch_nsight.collect.parent.measure import VerifyPlan

logger = logging.getLogger(__name__)

METRIC_SET_CHOICES = tuple(METRIC_SETS)
#: ncu's kernel filter that leaves NCCL's communication kernels out (see leaves_out_nccl).
NOT_NCCL = "regex:^(?!nccl)"
NCCL_NOTE = ("NCCL kernels are left out: replaying one waits for ranks that do not replay it. "
             "--metric-set duration times them too (one pass, no replay) and attributes them "
             "to the module whose backward launched them")
MARKER_HINT = ("to profile chosen steps, mark the loop: `for batch in loader: with "
               "torch_nsight.step(): train_step(batch)` and pass --steps A:B")


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add the ``profile`` subcommand to the top-level ``subparsers``; return its parser."""
    parser = subparsers.add_parser(
        "profile", help="run your own script under ncu and print its hotspots",
        description=description(__doc__),
        usage="%(prog)s [options] -- COMMAND [ARGS...]")
    accept_dashed_values(parser)  # --steps -1:2 is refused by read_steps, in one line
    parser.add_argument("--out", "-o", type=Path, default=Path("torch_nsight_profile"),
                        metavar="DIR", help="folder for the report(s) (default: "
                        "./torch_nsight_profile)")
    parser.add_argument("--steps", default=None, metavar="A:B",
                        help="profile only the steps torch_nsight.step() numbers A to B-1 "
                             "(or N: one step)")
    parser.add_argument("--runs", type=at_least(1), default=None, metavar="N",
                        help="profile N steps from --steps A, each kept as a run: tables give "
                             "the spread of their times and compare tells a change from "
                             "noise (same as --steps A:A+N; each run is one more replay of "
                             "every kernel)")
    parser.add_argument("--timeline", action="store_true",
                        help="no ncu: record the chosen steps with PyTorch's profiler (the "
                             "cheap first look: GPU idle, launch-bound steps, copies), into "
                             "--out; needs --steps and the step marker")
    parser.add_argument("--ranks", default=None, metavar="R[,R...]",
                        help="under torchrun --no-python: profile only these ranks, run the "
                             "others plainly")
    add_ncu_options(parser, DEFAULT_PROFILE_METRIC_SET)
    parser.add_argument("-k", "--kernel-name", default=None, metavar="REGEX",
                        help="profile only kernels whose name matches (ncu -k)")
    parser.add_argument("--no-replicate", action="store_true",
                        help="profile every one of identical repeated layers and repeated "
                             "op calls (default: instrument() checks the layers on the step "
                             "before --steps A, and an op call of step A that repeats an "
                             "earlier one takes its measurements)")
    parser.add_argument("--launch-skip", type=int, default=None, metavar="N",
                        help="skip the first N kernel launches (scripts without the marker)")
    parser.add_argument("--launch-count", type=int, default=None, metavar="N",
                        help="profile at most N kernel launches")
    parser.add_argument("--timeout", type=float, default=None, metavar="S",
                        help="stop the command after S seconds, all its runs together (its "
                             "partial report is kept)")
    parser.add_argument("--dry-run", action="store_true",
                        help="print the ncu command line and the metrics; with --steps, run "
                             "the command once without ncu until its chosen steps end and "
                             "say what ncu would get")
    add_verify_options(parser)
    add_stalls_option(parser)
    add_replicate_option(parser)
    add_table_options(parser)
    add_force(parser)
    parser.add_argument("command", nargs=argparse.REMAINDER, metavar="-- COMMAND",
                        help="the command to profile, after --")
    return parser


def add_ncu_options(parser: argparse.ArgumentParser, default: str | None) -> None:
    """Add what the commands that run ncu share: ``--metric-set``, ``--ncu``, ``--ncu-arg``.

    Args:
        parser: the subcommand's parser.
        default: its default metric set (None: the sweep's, which depends on ``--no-calls``).
    """
    parser.add_argument("--metric-set", default=default, choices=METRIC_SET_CHOICES,
                        help=f"what ncu collects (default: {default or 'fast, or lean with --no-calls'}; "
                             "fast: times and DRAM bytes in one pass, FLOPs from the calls "
                             "table; roofline: FLOP counters and speed-of-light, 16 passes; "
                             "lean: FLOP counters, 8 passes; full: everything; duration: "
                             "times only, one pass, NCCL kernels kept)")
    parser.add_argument("--ncu", default=None, metavar="PATH", help="the ncu executable")
    parser.add_argument("--ncu-arg", action="append", default=[], metavar="ARG",
                        help="one more ncu argument (repeat for several)")


def parse_ranks(text: str | None) -> set[int] | None:
    """``0`` or ``0,2`` -> a set of ranks; None stays None.

    Raises:
        UsageError: not a comma-separated list of ints >= 0.
    """
    if text is None:
        return None
    try:
        ranks = {int(part) for part in text.split(",") if part.strip()}
    except ValueError:
        raise UsageError(f"--ranks {text!r}: expected ranks like 0 or 0,1") from None
    if not ranks or min(ranks) < 0:
        raise UsageError(f"--ranks {text!r}: expected ranks like 0 or 0,1")
    return ranks


def _command(args: argparse.Namespace) -> list[str]:
    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        raise UsageError("no command to profile: write it after --, e.g. "
                         "`torch-nsight profile --steps 10:12 -- python train.py`")
    return command


def ncu_advice(err: NcuNotFoundError, fallback: str) -> NcuNotFoundError:
    """The error of a missing ``ncu`` in command-line terms (``--ncu PATH``), with what to
    do without it; other ``ncu`` errors unchanged."""
    from torch_nsight.collect.shared.ncu import NCU_MISSING

    if not err.missing:
        return err
    return NcuNotFoundError(f"{NCU_MISSING}: pass --ncu PATH or set ${NCU_ENV}; {fallback}",
                            missing=True)


def _check(args: argparse.Namespace) -> None:
    """Check the options; ``args.steps`` becomes the :class:`Steps` chosen (or None)."""
    settle_table_options(args)
    check_verify_options(args)
    chosen = args.steps = read_steps(args.steps, "--steps")
    if chosen is not None:
        if args.runs is not None:
            if chosen.count != 1:
                raise UsageError(f"--runs {args.runs} counts the steps from --steps A: give "
                                 f"one step (--steps {chosen.first} --runs {args.runs}), or "
                                 f"--steps A:B without --runs")
            args.steps = Steps(chosen.first, chosen.first + args.runs)
    elif args.runs is not None:
        raise UsageError(f"--runs {args.runs} profiles that many steps from the one --steps "
                         f"names: pass --steps A too (e.g. --steps 10 --runs {args.runs})")
    for name in ("launch_skip", "launch_count"):
        value = getattr(args, name)
        if value is not None and value < 0:
            raise UsageError(f"--{name.replace('_', '-')} must be >= 0, got {value}")
    if args.timeout is not None and args.timeout <= 0:
        raise UsageError(f"--timeout must be > 0 seconds, got {args.timeout}")


def run_plainly(command: Sequence[str]) -> int:
    """Run ``command`` without a profiler (a rank that is not profiled); its exit status."""
    try:
        return subprocess.run(list(command), check=False).returncode
    except FileNotFoundError:
        raise UsageError(f"command not found: {command[0]}") from None


def _profiles_rank(ranks: set[int] | None, rank: int | None) -> bool:
    """Whether this process runs under ncu: always without ``--ranks``, else when its rank
    is among ``ranks``.

    Raises:
        UsageError: ``--ranks`` outside torchrun (no ``RANK`` or ``LOCAL_RANK``).
    """
    if ranks is None:
        return True
    if rank is None:
        raise UsageError("--ranks needs RANK or LOCAL_RANK: run torch-nsight inside "
                         "torchrun, e.g. `torchrun --nproc-per-node 2 --no-python "
                         "torch-nsight profile --ranks 0 -- python train.py`")
    return rank in ranks


def _checked_ncu(path: str | None) -> str:
    """The ncu executable (``--ncu``, else found), its version checked.

    Raises:
        NcuNotFoundError: no usable ncu (with what to do without it).
    """
    from torch_nsight.collect.shared import ncu as ncu_cli

    try:
        ncu = ncu_cli.find_ncu(path)
    except NcuNotFoundError as err:
        raise ncu_advice(err, "without Nsight Compute, `torch-nsight profile --timeline "
                              "--steps A:B -- COMMAND` takes the first look with PyTorch's "
                              "profiler") from None
    ncu_cli.ncu_version(ncu)
    return ncu


def _warn_what_is_profiled(args: argparse.Namespace) -> None:
    """Warn before the run of what it leaves out (NCCL kernels) or takes long on (every
    kernel, without ``--steps``)."""
    from torch_nsight.collect.parent import script

    if script.leaves_out_nccl(args.metric_set, os.environ):
        logger.warning("%s", NCCL_NOTE if not args.kernel_name else
                       "NCCL kernels hang under replay when other ranks do not replay them: "
                       "make sure -k leaves them out, or use --metric-set duration")
    if args.steps is None:
        logger.warning("no --steps: every kernel the command launches is profiled (slow for "
                       "a whole training run); %s", MARKER_HINT)


def _say_where_and_how_long(report: Path, log: Path, record: dict[str, Any]) -> None:
    """The report's path, ncu's log and the run's time by phase, on stderr."""
    phases = record["phases_s"]
    say(f"report: {report} (ncu's output: {log})", sys.stderr)
    before_s, listed = launch_list_time(record)
    say(f"time: {sum(phases.values()) + before_s:.1f} s = {listed}"
        f"start-up {phases['start']:.1f} s (the command "
        f"until its first profiled kernel) + profiling {record['kernels_profiled']} "
        f"kernels {phases['profiling']:.1f} s + loading {phases['load']:.1f} s", sys.stderr)


def run(args: argparse.Namespace) -> int:
    """Run ``torch-nsight profile``.

    Returns:
        The command's exit status (0 when it succeeded).

    Raises:
        UsageError: no command, bad options, or --ranks outside torchrun.
        OutputExistsError: the report exists without ``--force``.
        NcuNotFoundError, CounterPermissionError, NothingProfiledError: from ncu.
    """
    command = _command(args)
    _check(args)
    from torch_nsight.collect.parent.script import world_size

    check_stalls(args, world_size(os.environ))
    check_launch_replication(args, world_size(os.environ))
    ranks = parse_ranks(args.ranks)
    rank = current_rank(os.environ)
    if not _profiles_rank(ranks, rank):
        logger.info("rank %d is not profiled: running it plainly", rank)
        return run_plainly(command)
    verify = verify_plan(args, command, args.steps) if args.verify else None
    lock = rank_lock(None if ranks is None else rank)  # ranks write into one folder
    if args.timeline:
        return run_timeline(args, command, lock)
    name = "report" if rank is None or ranks is None else f"report-rank{rank}"
    report = args.out / f"{name}.ncu-rep"
    from torch_nsight.collect.parent import script
    from torch_nsight.collect.shared import ncu as ncu_cli

    options = dict(metric_set=args.metric_set, steps=args.steps, kernel_name=args.kernel_name,
                   launch_skip=args.launch_skip, launch_count=args.launch_count,
                   ncu_args=args.ncu_arg, replicate=not (args.no_replicate
                                                 or getattr(args, "replicate_launches", False)),
                   timeout=args.timeout)
    if args.dry_run:
        return dry_run(args, command, report, options, verify)
    ncu = _checked_ncu(args.ncu)
    check_out_folder(args.out)
    check_out_files(args.out, run_files(report), args.force)
    args.out.mkdir(parents=True, exist_ok=True)
    check_outputs([report], args.force)
    _warn_what_is_profiled(args)
    with locked_folder(args.out, lock):  # one writer at a time: a second one refuses
        forget_old_pass(report)
        plan, ran = run_with_launches(args, command, report, functools.partial(
            script.plan_script, command, report, ncu=ncu, **options,
            known=ncu_cli.known_metric_bases(ncu)))
        profile = ran.profile
        if args.stalls:
            profile = second_pass(plan, ran, ncu=ncu, ncu_args=args.ncu_arg,
                                  known=ncu_cli.known_metric_bases(ncu), timeout=args.timeout)
    if args.metric_set == "fast" and profile.calls is None:
        logger.warning("the report carries no calls table, so its kernels have no FLOPs and no "
                       "roofline place: call torch_nsight.instrument(model) in the script (it "
                       "records the shapes under profile by itself), or use --metric-set lean")
    from torch_nsight.cli.report import emit

    emit(profile, args)
    if verify is not None:
        verify_profile(profile, args, verify, ran.record)
    _say_where_and_how_long(report, plan.log, ran.record)
    say_replication_hint(args, profile.kernels, ran.record)
    return ran.exit_status


def dry_run(args: argparse.Namespace, command: Sequence[str], report: Path,
            options: dict[str, Any], verify: VerifyPlan | None) -> int:
    """``profile --dry-run``: what ncu would do in a line (its command line and metrics with
    ``-v``); without ``--steps`` the command checked
    (:func:`~torch_nsight.cli.command_check.check_command`), with them the command
    rehearsed without ncu (:func:`rehearse`), then ``--verify-fix``'s fixes measured.

    Raises:
        NothingProfiledError, UsageError: as :func:`rehearse`.
        VerifyError: as :func:`~torch_nsight.cli.verify.run_verify`.
    """
    from torch_nsight.collect.parent import script
    from torch_nsight.collect.shared import ncu as ncu_cli

    # as a run would need it (the sweep's dry run checks its own)
    check_out_folder(args.out, writable=True)
    try:
        ncu = ncu_cli.find_ncu(args.ncu)
    except Exception:  # noqa: BLE001 - a dry run shows the line even without ncu
        ncu = args.ncu or "ncu"
    plan = script.plan_script(command, report, ncu=ncu, **options, probe_launches=(
        probes_launches(args, script.world_size(os.environ))))
    if args.steps is None:
        check_command(command)  # the rehearsal checks the rest
    if getattr(args, "verbose", 0):
        print(shell_command(plan.ncu_command, quoted=[
            f"{k}={shlex.quote(v)}" for k, v in plan.script.shown().items()]))
        say_comment(f"# metrics ({plan.metric_set}): " + ", ".join(plan.metrics))
        if args.stalls:
            show_dry_run(plan, ncu, args.ncu_arg)
    else:
        say_comment(f"# dry run: ncu would profile `{shlex.join(command)}` with the "
                    f"{plan.metric_set} metric set ({len(plan.metrics)} metrics"
                    f"{', then a second pass for --stalls' if args.stalls else ''}) into "
                    f"{report}; -v prints its command line and metrics")
    say_launches_dry_run(args)
    if args.steps is None:
        say_comment("# the script was not run (without --steps ncu profiles every kernel of "
                    f"the whole run, and there is nothing to rehearse); {MARKER_HINT}")
        return 0
    rehearsed = rehearse(plan)
    if verify is not None:
        verify_named_fixes(verify, args.fmt)
    return rehearsed


def run_timeline(args: argparse.Namespace, command: Sequence[str], lock: str) -> int:
    """``profile --timeline``: the command runs plainly, its chosen steps recorded by
    PyTorch's profiler (see :mod:`torch_nsight.capture.script.profiler_steps`); then the verdict."""
    from torch_nsight.collect.parent import script

    if args.steps is None:
        raise UsageError("--timeline records the steps chosen with --steps (e.g. --steps "
                         f"10:12); {MARKER_HINT}")
    if args.dry_run:
        check_out_folder(args.out, writable=True)
        check_command(command)
        plan = script.plan_timeline(command, args.out, steps=args.steps)
        say_comment(f"# dry run: the command would run as below, PyTorch's profiler recording "
                    f"step(s) {args.steps} into {args.out}; nothing was run")
        print(shell_command(command, quoted=[
            f"{k}={shlex.quote(v)}" for k, v in plan.script.shown().items()]))
        return 0
    check_out_folder(args.out)
    manifest = args.out / TIMELINE_MANIFEST
    check_out_files(args.out, [*run_files(manifest, ncu=False), "trace*.json.gz", "trace.json",
                               "trace-rank*.json"], args.force)
    for old in [*args.out.glob("trace*.json.gz"), manifest] if args.force else ():
        old.unlink(missing_ok=True)
    from torch_nsight.cli.report import emit

    args.out.mkdir(parents=True, exist_ok=True)
    plan = script.plan_timeline(command, args.out, steps=args.steps, timeout=args.timeout)
    try:
        with locked_folder(args.out, lock):
            ran = script.run_script(plan)
    except (FileNotFoundError, PermissionError) as err:
        raise cannot_start(command, err) from None
    emit(ran.profile, args)
    say(f"timeline: {args.out} (open the trace*.json.gz in https://ui.perfetto.dev)",
        sys.stderr)
    return ran.exit_status
