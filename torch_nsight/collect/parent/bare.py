"""One bare run of the user's command (no ncu, no hooks): its chosen steps timed in the
script, a fix switched off and on in turn, step by step (``torch-nsight profile --verify``).

The command runs as it is (the same processes, the same arguments), told
(:class:`~torch_nsight.environment.ScriptEnv`, and nothing the profile's environment held of
it) the steps to time (those before them the warm-up), where the script writes their times,
the fixes :func:`torch_nsight.instrument` applies, to switch them off and on at each step
boundary (ABBA, each timed step noting which), and not to instrument (no ranges: the step as
the user runs it). It is stopped once its timed steps have ended, as a dry run is; a
script that ends before gives the steps it ran.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torch_nsight.collect.parent.rehearsal import run_until_steps_end
from torch_nsight.environment import ScriptEnv, Steps
from torch_nsight.verify_exchange import FixSpec, StepTimes, check_fix, read_timing

__all__ = ["BareRun", "bare_env", "run_bare"]


@dataclass(frozen=True)
class BareRun:
    """How one bare run went.

    Attributes:
        fixes: the fixes asked for.
        times: what the script wrote (None: nothing, see ``error``).
        exit_status: the command's exit status; None when it was stopped after its steps.
        stopped: why it was stopped before its steps ended, or None.
        seconds: how long it ran.
        error: why the run cannot be used (the script wrote no times, a step raised, a fix
            was not applied or could not be switched off and on), or None.
        fix_failed: that reason is a fix the script did not apply or switch.
    """

    fixes: tuple[FixSpec, ...]
    times: StepTimes | None
    exit_status: int | None
    stopped: str | None
    seconds: float
    error: str | None
    fix_failed: bool = False


def bare_env(environ: Mapping[str, str], steps: Steps, fixes: Sequence[FixSpec],
             timing: Path, status: Path, *, alternate: bool = False) -> dict[str, str]:
    """The environment of a bare run (see the module's docstring): ``environ`` without what
    it held for a script, and the bare run's own; the fixes switched off and on step by
    step when ``alternate``, else on throughout.

    Raises:
        ValueError: a fix :func:`~torch_nsight.verify_exchange.check_fix` refuses.
    """
    script = ScriptEnv(steps=steps, timing=timing, status=status, instrument=False,
                       fixes=tuple(check_fix(f) for f in fixes),
                       alternate=bool(fixes) and alternate)
    return script.environment(environ, inherit=False)


def _fix_not_applied(times: StepTimes, fixes: Sequence[FixSpec]) -> str | None:
    """Why a fix asked for was not applied, or not switched off and on, or None."""
    failed = [f for f in times.fixes if f.get("status") != "applied"]
    if failed:
        return "; ".join(f"fix {f.get('fix')} not applied: {f.get('error')}" for f in failed)
    if fixes and not times.fixes:
        return ("the fix was not applied: the script never called "
                "torch_nsight.instrument(model), which applies it")
    if times.toggle_error is not None:
        return f"the fix could not be switched off and on between steps: {times.toggle_error}"
    return None


def _why_unusable(times: StepTimes) -> str | None:
    raised = [str(s["index"]) for s in times.steps if s.get("status") != "ok"]
    if raised:
        return f"step(s) {', '.join(raised)} raised an exception"
    return None


def run_bare(command: Sequence[str], steps: Steps, fixes: Sequence[FixSpec], *,
             name: str = "bare run", timeout: float | None = None, quiet: bool = False,
             environ: Mapping[str, str] | None = None) -> BareRun:
    """Run ``command`` bare once, ``fixes`` switched off and on step by step, and read its
    step times.

    Args:
        command: the user's command.
        steps: the steps to time (a closed window).
        fixes: the fixes to alternate.
        name: the run's name in logs.
        timeout: seconds it may run (None: no limit).
        quiet: no progress bar.
        environ: the environment to start from (default ``os.environ``).

    Returns:
        The run; ``error`` says why it cannot be used, if so.

    Raises:
        KeyboardInterrupt: interrupted.
        FileNotFoundError: the command does not exist.
    """
    with tempfile.TemporaryDirectory(prefix="torch_nsight-verify-") as folder:
        timing, status = Path(folder) / "steps.json", Path(folder) / "status.jsonl"
        env = bare_env(os.environ if environ is None else environ, steps, fixes, timing,
                       status, alternate=True)
        outcome = run_until_steps_end(name, command, env, Path(folder), steps=steps.count,
                                      timeout=timeout, quiet=quiet)
        times: StepTimes | None
        error: str | None = None
        failure: str | None
        try:
            times = read_timing(timing)
            error = _fix_not_applied(times, fixes)
        except FileNotFoundError:
            times, failure = None, _no_times(outcome.returncode, outcome.stopped)
        except ValueError as err:
            times, failure = None, str(err)
        else:
            failure = error or _why_unusable(times)
    ours = outcome.completed
    return BareRun(tuple(fixes), times, None if ours else outcome.returncode,
                   None if ours else outcome.stopped, outcome.seconds, failure,
                   fix_failed=error is not None)


def _no_times(returncode: int | None, stopped: str | None) -> str:
    if stopped:
        return f"it was stopped before its steps ended ({stopped})"
    reason: Any = (f"the command failed (exit status {returncode})" if returncode
                   else "the command ended")
    return (f"{reason} without timing a step: does it mark its loop with "
            "`with torch_nsight.step():` and run that many steps?")
