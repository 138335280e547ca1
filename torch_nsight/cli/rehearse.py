"""``torch-nsight profile --dry-run --steps A:B``: the command rehearsed without ncu, and
what ncu would get, in words."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from torch_nsight.cli.command_check import cannot_start
from torch_nsight.cli.profile_launches import said_modules
from torch_nsight.cli.text import say_comment
from torch_nsight.errors import NothingProfiledError
from torch_nsight.units import counted

if TYPE_CHECKING:
    from torch_nsight.collect.parent.script import ScriptPlan


def rehearse(plan: ScriptPlan) -> int:
    """``profile --dry-run --steps A:B``: run the command without ncu until its chosen steps
    end, and say what ncu would get (see :func:`~torch_nsight.collect.parent.rehearsal.rehearse`).

    Raises:
        NothingProfiledError: no chosen step ran.
        UsageError: the command cannot be started.
    """
    from torch_nsight.collect.parent import rehearsal, script

    try:
        done = rehearsal.rehearse(plan)
    except (FileNotFoundError, PermissionError) as err:
        raise cannot_start(plan.command, err) from None
    if done.exit_status is None:
        ended = "until its chosen steps ended"
    elif done.stopped is not None:
        ended = f"until it was stopped: {done.stopped}"
    else:
        ended = f"to its end (exit status {done.exit_status})"
    say_comment(f"# dry run: the command ran without ncu {ended}, {done.seconds:.1f} s")
    if done.checked is not None:
        say_comment(f"# step {done.checked['index']}: {_checked(done.checked)}")
    if done.recurrent is not None:  # found, its names unreadable: "unnamed"
        say_comment(f"# cuDNN recurrent layers ({said_modules(done.recurrent)}): their time steps "
                    "launch the same kernels from one call, so profile would first list the "
                    "chosen steps' launches without ncu, then profile a few of each kind "
                    "(--replicate-launches; --no-replicate-launches profiles every launch)")
    for step in done.steps:
        say_comment(f"# step {step['index']}: {_step_line(step, plan.metric_set)}")
    ran = [s for s in done.steps if s.get("status") == "ok"]
    exited = [s for s in done.steps if s.get("status") == "exited"]
    raised = [str(s["index"]) for s in done.steps if s.get("status") not in ("ok", "exited")]
    if exited:
        raise NothingProfiledError(f"the command exited inside chosen step "
                                   f"{exited[0]['index']} (sys.exit, exit status "
                                   f"{exited[0].get('exit_status')}): under ncu it would too")
    if raised:
        raise NothingProfiledError(f"the dry run's chosen step(s) {', '.join(raised)} raised "
                                   "an exception (see the command's output above): under ncu "
                                   "they would too")
    if len(ran) < (plan.n_steps or 1):
        reached = ("it marked no step with torch_nsight.step()" if done.last_step is None
                   else f"its last step was {done.last_step}")
        if done.stopped is not None:
            raise NothingProfiledError(f"the dry run did not reach the end of the chosen steps "
                                       f"before it was stopped ({done.stopped}; {reached})")
        if done.exit_status:
            raise NothingProfiledError(f"the dry run did not reach the end of the chosen steps: "
                                       f"the command failed (exit status {done.exit_status}; "
                                       f"{reached}): its output is above")
        if not ran:
            raise NothingProfiledError(f"the dry run reached no chosen step that ended: "
                                       f"{reached}. {script.why_nothing(plan.steps)}")
        say_comment(f"# only {len(ran)} of the {plan.n_steps} chosen steps ran: the command "
                    f"ended after step {done.last_step}")
    chosen = (", ".join(str(s["index"]) for s in ran) if plan.n_steps is not None
              else f"{ran[0]['index']} and every later one")
    if ran and all(s.get("cuda") == 0 for s in ran):
        say_comment("# warning: the chosen steps initialized no CUDA (the model and its inputs "
                    "on the CPU?): under ncu they would launch no kernel to profile")
    say_comment(f"# ready: without --dry-run, ncu profiles step(s) {chosen}")
    return 0


def _checked(event: dict[str, Any]) -> str:
    """The sibling check of a dry run, in words."""
    if event.get("failed"):
        return "the step raised, so no identical sibling is replicated"
    if event.get("replicas"):
        return (f"{event['replicas']} identical sibling(s) in {event['groups']} group(s) are "
                "left out of profiling and take their representative's rows")
    why = event.get("mismatches") or []
    return ("no identical siblings to replicate" + (f" ({why[0]})" if why else ""))


def _step_line(step: dict[str, Any], metric_set: str) -> str:
    """One chosen step of a dry run, in words, with what ncu would miss."""
    line = f"{step.get('status')} in {step.get('elapsed_s', 0.0):.2f} s"
    if step.get("status") == "exited":
        return line + f": the command exited in it (exit status {step.get('exit_status')})"
    if step.get("status") != "ok":
        return line + ": it raised"
    if not step.get("modules"):
        return (line + "; no module instrumented: call torch_nsight.instrument(model) before "
                "the loop, or no kernel is attributed to a module")
    line += f"; {counted(int(step['modules']), 'module')} instrumented"
    if step.get("calls"):
        line += f", {step['calls']} torch calls recorded (their shapes give the FLOPs)"
        if step.get("op_replicas"):
            line += (f", {step['op_replicas']} repeated op calls left out of profiling (each "
                     "takes the rows of the call it repeats)")
    elif step.get("compiled"):
        line += ("; compiled graphs ran: their kernels are attributed to modules, with "
                 "no calls table (no FLOPs from shapes)" +
                 ("; --metric-set lean counts them" if metric_set == "fast" else ""))
    elif metric_set == "fast":
        line += ("; no calls table (instrument(record_calls=False)?): the fast metric set "
                 "then has no FLOPs, use --metric-set lean")
    return line
