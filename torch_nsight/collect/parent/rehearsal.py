"""Commands run without ncu until their chosen steps end: ``profile --dry-run``'s rehearsal
(:func:`rehearse`), and the passes that need the user's steps first (the launch list of
``--replicate-launches``, ``--verify``'s bare runs) through :func:`run_until_steps_end`."""

from __future__ import annotations

import math
import os
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from torch_nsight.collect.parent.launch import ChildOutcome, ChildSpec, Interrupted, run_children
from torch_nsight.collect.parent.progress import Progress
from torch_nsight.status import RECURRENT_EVENT, StatusReader, recurrent_modules

if TYPE_CHECKING:
    from torch_nsight.collect.parent.script import ScriptPlan


@dataclass(frozen=True)
class Rehearsal:
    """How a command ran without ncu, as it would under it (``profile --dry-run``).

    Attributes:
        exit_status: the command's own exit status, or None when it was stopped after its
            chosen steps (a dry run needs nothing after them).
        seconds: how long it ran.
        steps: the chosen steps' status lines (``index``, ``status``, ``elapsed_s``,
            ``modules`` instrumented, ``calls`` recorded, ``replicas`` left out).
        last_step: the highest step index the command reached (None: no step marked).
        checked: the sibling check on the step before the chosen ones (``groups``,
            ``replicas``, ``mismatches``), or None when none ran.
        stopped: why it was stopped before its chosen steps ended (``--timeout``, no sign
            of life), or None.
        recurrent: the cuDNN recurrent layers the probe found (``profile`` would list the
            launches first), or None where it did not look or found none.
    """

    exit_status: int | None
    seconds: float
    steps: list[dict[str, Any]]
    last_step: int | None
    checked: dict[str, Any] | None
    stopped: str | None = None
    recurrent: list[str] | None = None


def rehearse(plan: ScriptPlan) -> Rehearsal:
    """Run the command once without ncu, as it would run under it, and stop it when its
    chosen steps have ended (the first one, for an open-ended ``A:``): the steps,
    ``instrument()``'s calls table and the sibling check run (on the CPU too), nothing is
    profiled or written beside the report.

    Raises:
        KeyboardInterrupt: interrupted.
        FileNotFoundError: the command does not exist.
    """
    with tempfile.TemporaryDirectory(prefix="torch_nsight-dry-run-") as folder:
        status = Path(folder) / "status.jsonl"
        env = replace(plan.script, status=status, rehearsal=True).environment(plan.environ)
        outcome = run_until_steps_end("dry run", plan.command, env, Path(folder),
                                      steps=plan.n_steps, timeout=plan.timeout,
                                      quiet=plan.quiet)
        events = StatusReader(status).poll()
    reached = [e["index"] for e in events if e.get("event") in ("step", "item_start")]
    checked = [e for e in events if e.get("event") == "siblings_checked"]
    recurrent = [e for e in events if e.get("event") == RECURRENT_EVENT]
    ours = outcome.completed
    return Rehearsal(exit_status=None if ours else outcome.returncode,
                     seconds=outcome.seconds,
                     steps=[e for e in events if e.get("event") == "item_end"],
                     last_step=max(reached) if reached else None,
                     checked=checked[0] if checked else None,
                     stopped=None if ours else outcome.stopped,
                     recurrent=recurrent_modules(recurrent[0].get("modules"))
                     if recurrent else None)


def run_until_steps_end(name: str, command: Sequence[str], env: dict[str, str], folder: Path,
                        *, steps: int | None, timeout: float | None, quiet: bool
                        ) -> ChildOutcome:
    """Run ``command`` without ncu, its output shown, and stop it when its chosen steps
    have ended (its ``folder/status.jsonl`` says so; the step marker writes it where
    ``env`` names it) or after ``timeout`` seconds.

    Raises:
        KeyboardInterrupt: interrupted.
        FileNotFoundError: the command does not exist.
    """
    progress = Progress("step", steps, steps=steps, quiet=quiet)
    spec = ChildSpec(name, list(command), env, folder / "status.jsonl", folder / "result.json",
                     None, None, items=steps or 1,
                     deadline_s=math.inf if timeout is None else timeout,
                     echo=progress.write, stop_when_done=True)
    try:
        (outcome,) = run_children([spec], item_timeout=math.inf, startup_s=0.0,
                                  cwd=os.getcwd(), progress=progress)
    except Interrupted:
        raise KeyboardInterrupt from None
    return outcome
