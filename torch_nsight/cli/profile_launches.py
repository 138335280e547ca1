"""``torch-nsight profile --replicate-launches``: the option, its checks, and the launch list's
pass before ncu's (the pass itself: :mod:`torch_nsight.collect.parent.launch_list`)."""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from torch_nsight.cli.command_check import cannot_start
from torch_nsight.cli.outputs import UsageError
from torch_nsight.errors import NothingProfiledError, OutputWriteError
from torch_nsight.status import recurrent_modules

if TYPE_CHECKING:
    from torch_nsight.collect.parent.script import ScriptPlan, ScriptRun

logger = logging.getLogger(__name__)

REPLICATE_HELP = (
    "run the command once without ncu first, recording the chosen steps' launches, then "
    "profile only a few of each kind of repeated launch (same kernel, grid, block, "
    "registers, similar duration; 3 spread over the step) and give the others their "
    "counters: for steps that launch the same kernels many times from inside one call (a "
    "recurrent layer's time steps), where identical blocks cannot be told apart. Needs "
    "steps with an end (--steps A or A:B), eager (no compiled or CUDA graphs in them). "
    "Default: on where the instrumented models hold cuDNN recurrent layers (nn.LSTM, nn.GRU, "
    "nn.RNN on the GPU; the command's first step then ends the run under ncu, which starts "
    "again after the launch list); --no-replicate-launches: never")


def add_replicate_option(parser: argparse.ArgumentParser) -> None:
    """Add ``--replicate-launches`` / ``--no-replicate-launches`` to ``profile``'s parser
    (default None: automatic, see :func:`probes_launches`)."""
    parser.add_argument("--replicate-launches", action=argparse.BooleanOptionalAction,
                        default=None, help=REPLICATE_HELP)


def check_launch_replication(args: argparse.Namespace, world_size: int) -> None:
    """Refuse ``--replicate-launches`` where ncu's numbering cannot follow the launch list.

    Raises:
        UsageError: without ``--steps`` or with steps without an end; with ``--timeline``,
            ``--stalls``, ``-k``, ``--launch-skip``, ``--launch-count`` or ncu's own filters
            in ``--ncu-arg``; in a run of several ranks.
    """
    if not getattr(args, "replicate_launches", False):
        return
    if args.steps is None:
        raise UsageError("--replicate-launches numbers the launches of the chosen steps: pass "
                         "--steps A or A:B (and mark the loop with torch_nsight.step())")
    if args.steps.count is None:
        raise UsageError(f"--replicate-launches lists the chosen steps' launches before ncu "
                         f"runs, so the steps need an end: --steps {args.steps.first}:B, "
                         f"not --steps {args.steps.first}:")
    if args.ranks is not None or world_size > 1:
        raise UsageError("--replicate-launches runs the command a second time, which a run of "
                         "several ranks cannot do alone: profile one process without it")
    clashing = [option for option, given in (
        ("--timeline", args.timeline), ("--stalls", getattr(args, "stalls", False)))
        if given] + launch_filters(args)
    if clashing:
        raise UsageError(f"--replicate-launches chooses the launches ncu profiles itself: it "
                         f"does not go with {clashing[0]}")


def probes_launches(args: argparse.Namespace, world_size: int) -> bool:
    """Whether ``profile`` looks for cuDNN recurrent layers in the command's first step and,
    where it finds them, replicates launches by itself: neither ``--replicate-launches`` nor
    ``--no-replicate-launches`` given, replication not turned off (``--no-replicate``), not
    the duration-only set (it measures every launch, as cheaply as a launch list), and a run
    the option would take (:func:`check_launch_replication`)."""
    if (getattr(args, "replicate_launches", None) is not None or args.no_replicate
            or args.metric_set == "duration"):
        return False
    try:
        check_launch_replication(_forced(args), world_size)
    except UsageError:
        return False
    return True


def _forced(args: argparse.Namespace) -> argparse.Namespace:
    """``args`` as if ``--replicate-launches`` had been given."""
    return argparse.Namespace(**{**vars(args), "replicate_launches": True})


def run_with_launches(args: argparse.Namespace, command: Sequence[str], report: Path,
                      plan_for: Callable[..., ScriptPlan]) -> tuple[ScriptPlan, ScriptRun]:
    """Plan and run the profile: with ``--replicate-launches``, after the launch list's pass;
    without either option, probing for cuDNN recurrent layers (:func:`probes_launches`) and,
    where the probe ends the command, again after the launch list's pass (a launch list that
    fails leaves every launch profiled, with a warning). Where this command's last run into
    the same folder found them, the launch list comes first, without the probe's run.

    Args:
        plan_for: :func:`~torch_nsight.collect.parent.script.plan_script` with the run's
            options bound; takes ``launches``, ``kernel_id`` and ``probe_launches``.

    Raises:
        NothingProfiledError, UsageError: as :func:`replicate_launches`; TorchNsightError:
            as :func:`~torch_nsight.collect.parent.script.run_script`.
    """
    from torch_nsight.cli.text import say_comment
    from torch_nsight.collect.parent import script
    from torch_nsight.collect.parent.launch_list import forget_launches

    left = _time_left(args.timeout)
    listed = replicate_launches(args, command, report, timeout=left())
    probing = not listed and probes_launches(args, script.world_size(os.environ))
    found = _found_last_time(command, report) if probing else []
    memo, started, probe_s = bool(found), time.monotonic(), 0.0
    if not found:
        plan = plan_for(probe_launches=probing, timeout=left(), **listed)
        try:
            return plan, script.run_script(plan)
        except script.RecurrentLayers as probed:
            found, probe_s = probed.modules, time.monotonic() - started
            _say_recurrent(found, "")
    else:
        _say_recurrent(found, ", found by this command's last run into this folder")
    remaining = left()
    try:  # after the last run's memo, the launch list's own first step looks again
        listed = replicate_launches(_forced(args), command, report, probe=memo,
                                    timeout=remaining)
        listed["launches"] = {**listed["launches"], "recurrent": found,
                              "probe_s": round(probe_s, 3)}
    except (NothingProfiledError, OutputWriteError) as err:  # the user did not ask for it
        logger.warning("the launch list for the cuDNN recurrent layers: %s; profiling every "
                       "launch instead", getattr(err, "reason", err))
        forget_launches(report)  # what the failed pass left beside the report
        listed = {}
    if listed and listed["launches"].get("seen") == []:  # the memo's layers are gone
        say_comment("# no cuDNN recurrent layer ran this time: profiling as usual")
        forget_launches(report)
        listed = {}
    plan = plan_for(timeout=left(), **listed)
    return plan, script.run_script(plan)


#: The fewest seconds of ``--timeout`` a run after the first is started with.
MIN_RUN_S = 5.0


def _time_left(timeout: float | None) -> Callable[[], float | None]:
    """What is left of ``--timeout`` for each of the command's runs (the probe's, the launch
    list's, ncu's): one limit for the whole ``profile``, not one a run.

    Raises (when called):
        NothingProfiledError: the limit ran out before the next run (or left it less than
            :data:`MIN_RUN_S`, a run after the first).
    """
    started = time.monotonic()

    def left() -> float | None:
        if timeout is None:
            return None
        spent = time.monotonic() - started
        if spent >= timeout or (spent > 1.0 and timeout - spent < MIN_RUN_S):
            raise NothingProfiledError(
                f"--timeout {timeout:g} s ran out after {spent:.0f} s, before ncu's run (the "
                "command ran first to find cuDNN recurrent layers or to list its launches): "
                "give --timeout more, or --no-replicate-launches")
        return timeout - spent
    return left


def _found_last_time(command: Sequence[str], report: Path) -> list[str]:
    """The cuDNN recurrent layers the probe found in the last run of ``command`` into the
    report's folder (its manifest), or []."""
    from torch_nsight import formats
    from torch_nsight.collect.parent.engine import last_run

    last = last_run(report.with_suffix(formats.RUN_SUFFIX)) or {}
    launches = last.get("replicated_launches")
    if last.get("command") != list(command) or not isinstance(launches, dict):
        return []
    return recurrent_modules(launches.get("recurrent"))


#: The most module names a line on cuDNN recurrent layers lists, after folding.
SAID_MODULES = 6


def said_modules(modules: Sequence[str]) -> str:
    """The recurrent layers' names for a line: block indices folded
    (``encoder.{0-23}.lstm``), the first :data:`SAID_MODULES` of them, then how many more;
    "unnamed" for none."""
    from torch_nsight.analyze.fold import folded_name, index_template

    slots: dict[str, list[tuple[int, ...]]] = {}
    for module in modules:
        template, indices = index_template(module)
        if template.count("{}") != len(indices):  # braces of its own: not folded
            template, indices = module, ()
        slots.setdefault(template, []).append(indices)
    names = [folded_name(t, ix) if ix[0] else t for t, ix in slots.items()]
    more = len(names) - SAID_MODULES
    shown = ", ".join(names[:SAID_MODULES]) or "unnamed"
    return shown + (f" and {more} more" if more > 0 else "")


def _say_recurrent(modules: list[str], how: str) -> None:
    from torch_nsight.cli.text import say_comment

    say_comment(f"# cuDNN recurrent layers ({said_modules(modules)}){how}: their time steps launch "
                "the same kernels from one call, so the chosen steps' launches are listed "
                "first without ncu and ncu profiles a few of each kind "
                "(--no-replicate-launches profiles every launch)")


def launch_list_time(record: dict[str, Any]) -> tuple[float, str]:
    """The seconds a profile spent before its ncu run (the probe's run that ended, the
    launch list), and the time line's words for them ("" where none)."""
    first = record.get("replicated_launches") or {}
    if not first:
        return 0.0, ""
    probe_s = float(first.get("probe_s") or 0.0)
    probed = (f"the probe's run {probe_s:.1f} s (cuDNN recurrent layers found) + "
              if probe_s else "")
    return (probe_s + float(first.get("seconds", 0.0)),
            f"{probed}the launch list {first['seconds']:.1f} s ({first['launches']} launches) + ")


def say_launches_dry_run(args: argparse.Namespace) -> None:
    """A dry run's line on ``--replicate-launches`` (the probe's finding is the rehearsal's)."""
    from torch_nsight.cli.text import say_comment

    if getattr(args, "replicate_launches", False):
        say_comment("# --replicate-launches: the command first runs without ncu to list its "
                    "launches; ncu's --kernel-id, added then, keeps a few of each kind")


def launch_filters(args: argparse.Namespace) -> list[str]:
    """The options given that choose which launches ncu profiles (``-k``, the launch
    filters, an ``--ncu-arg`` that filters), as the user wrote them."""
    return [option for option, given in (
        ("-k", args.kernel_name), ("--launch-skip", args.launch_skip is not None),
        ("--launch-count", args.launch_count is not None),
        ("--ncu-arg " + next((a for a in args.ncu_arg if filters_launches(a)), ""),
         any(filters_launches(a) for a in args.ncu_arg))) if given]


def filters_launches(arg: str) -> bool:
    """Whether an ncu argument chooses which launches ncu profiles."""
    return arg.split("=")[0] in ("-k", "--kernel-name", "--kernel-id", "--launch-skip", "-s",
                                 "--launch-count", "-c", "--filter-mode", "--kernel-name-base",
                                 "--nvtx-include", "--nvtx-exclude", "--range-filter",
                                 "--launch-skip-before-match", "--kernel-regex-base")


def replicate_launches(args: argparse.Namespace, command: Sequence[str], report: Path,
                       *, probe: bool = False, timeout: float | None = None
                       ) -> dict[str, Any]:
    """With ``--replicate-launches``, run the launch list's pass: what
    :func:`~torch_nsight.collect.parent.script.plan_script` takes of it (``launches``,
    ``kernel_id``). Without it, a launch list left beside ``report`` by an earlier run is
    removed (the new report would otherwise be read with it). ``timeout``: the pass's
    seconds (None: ``--timeout``'s).

    Raises:
        NothingProfiledError: the pass recorded no launch.
        UsageError: the command cannot be started.
    """
    from torch_nsight.collect.parent.launch_list import forget_launches, record_launches

    if not getattr(args, "replicate_launches", False):
        forget_launches(report)
        return {}
    try:
        listed = record_launches(command, report, steps=args.steps,
                                 timeout=args.timeout if timeout is None else timeout,
                                 quiet=False, environ=os.environ, probe=probe)
    except (FileNotFoundError, PermissionError) as err:
        raise cannot_start(command, err) from None
    return {"launches": listed.summary(), "kernel_id": listed.plan.kernel_id}


#: The hint needs the profiling it would save to exceed the launch list's cost (about one
#: start-up of the command) by this factor.
HINT_MARGIN = 1.5


def replication_hint(kernels: Any, *, seconds_per_kernel: float, start_s: float) -> str | None:
    """One line suggesting ``--replicate-launches`` when this profile's repeated launches cost
    more profiling than a launch list would (see :func:`~torch_nsight.report.launch_replicas.
    replicated_count`), or None (also where compiled graphs ran, which the option refuses).

    Args:
        kernels: the profile's kernel table.
        seconds_per_kernel: what one profiled kernel cost this run.
        start_s: this run's start-up (the launch list's pass costs about as much).
    """
    from torch_nsight.report.launch_replicas import ran_compiled, replicated_count

    if ran_compiled(kernels):  # the option refuses compiled graphs
        return None
    measured, profiled = replicated_count(kernels)
    saved = (measured - profiled) * seconds_per_kernel
    if saved <= HINT_MARGIN * start_s:
        return None
    return (f"hint: {measured - profiled} of the {measured} kernels profiled repeat a kind of "
            f"launch profiled 3 times already: --replicate-launches would profile about {profiled} "
            f"(about {saved:.0f} s less profiling, for one more start-up of the command without "
            f"ncu, about {start_s:.0f} s)")


def say_replication_hint(args: argparse.Namespace, kernels: Any, record: dict[str, Any]) -> None:
    """The hint on standard error after a profile that did not replicate its launches."""
    from torch_nsight.cli.text import say
    from torch_nsight.collect.parent.script import world_size

    phases, profiled = record.get("phases_s") or {}, record.get("kernels_profiled") or 0
    if (getattr(args, "replicate_launches", None) is not None  # given, either way
            or record.get("replicated_launches")
            or args.metric_set == "duration" or not profiled):
        return
    try:  # only where the option would be taken
        check_launch_replication(_forced(args), world_size(os.environ))
    except UsageError:
        return
    hint = replication_hint(kernels, seconds_per_kernel=phases.get("profiling", 0.0) / profiled,
                         start_s=phases.get("start", 0.0))
    if hint is not None:
        say(hint, sys.stderr)
