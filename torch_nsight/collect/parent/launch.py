"""Start the sweep's child processes (under ``ncu`` or alone), watch them, stop them.

Each child runs in a session of its own (its own process group) so that it can be stopped
as a whole. The parent reads its output line by line (``ncu``'s ``==PROF==``/``==ERROR==``
lines included) and tails its status file for progress. Timeouts, gentlest first:

* a shape running longer than ``item_timeout``: SIGINT to the Python child only; it records
  the shape as ``timeout`` and goes on with the next one (same ``ncu`` process);
* a shape that ignores that for :data:`ITEM_GRACE_S`, the whole child running past its
  overall deadline, or the parent interrupted (Ctrl-C, or SIGTERM while the children run):
  SIGTERM to the Python child, which records what it did and exits, after which ``ncu``
  writes the report of every kernel profiled so far; after :data:`STOP_GRACE_S`, SIGTERM to
  the process group (``ncu`` too: its report may then be lost), and SIGKILL after
  :data:`KILL_GRACE_S` more.

A child that shows no sign of life (no output line, no progress event) for
:func:`silence_s` seconds (``$TORCH_NSIGHT_SILENCE_S``; default 600, or the per-shape
timeout and its grace when longer) is stopped the same
way, with what it was doing (the shape and its phase) and its last output lines in the
warning and in the shape's error; the other shapes' results are kept.

An interrupted parent raises :class:`Interrupted` with the children's outcomes once they
have stopped, so that the sweep writes down (and keeps loadable) every finished shape; a
second Ctrl-C kills the children at once.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from torch_nsight.collect.parent.progress import Progress, describe_current
from torch_nsight.collect.shared.ncu import NcuOutput
from torch_nsight.environment import SILENCE_ENV
from torch_nsight.files import write_error
from torch_nsight.status import StatusReader

logger = logging.getLogger(__name__)

POLL_S = 0.1
SILENCE_S = 600.0
CHILD_LOG_PREFIX = "torch_nsight child:"  # the worker's log format: shown as warnings
#: ncu's lines of progress, which a progress bar replaces (they stay in the log file).
NCU_PROGRESS_LINES = ("==PROF== Profiling", "==PROF== Disconnected")
ITEM_GRACE_S = 30.0
STOP_GRACE_S = 60.0
KILL_GRACE_S = 15.0
DONE_GRACE_S = 3.0  # a child stopped when its items ended (stop_when_done) has nothing to save


@dataclass
class ChildSpec:
    """One child process to run.

    Attributes:
        name: short name for logs (``sweep``, ``sweep-dev1``).
        command: the argument list (``ncu ... python -m torch_nsight.collect.child.start job``).
        env: its environment.
        status_path: the status file it appends to.
        result_path: the result JSON it writes.
        report_path: the ``.ncu-rep`` it should produce (None for a dry run).
        log_path: where to keep its whole output (None: not kept).
        items: how many (variant, shape) items it runs.
        planned: those (variant, shape) labels, to record as failed if it never reports.
        deadline_s: seconds it may run as a whole (None: ``item_timeout`` x ``items`` +
            ``startup_s``; ``math.inf``: no limit).
        echo: a user's command (``torch-nsight profile``) rather than a sweep's worker: it
            reads our standard input, and its output lines, ncu's line per kernel apart, go
            to ``echo`` (above the progress bar).
        stop_when_done: stop it, its whole process group, once its ``items`` have ended
            (SIGTERM, SIGKILL after :data:`DONE_GRACE_S`): a dry run of a user's command
            needs nothing after its chosen steps.
    """

    name: str
    command: list[str]
    env: dict[str, str]
    status_path: Path
    result_path: Path
    report_path: Path | None
    log_path: Path | None
    items: int
    planned: list[tuple[str | None, str]] = field(default_factory=list)
    deadline_s: float | None = None
    echo: Callable[[str], None] | None = None
    stop_when_done: bool = False


@dataclass
class ChildOutcome:
    """How one child ended."""

    spec: ChildSpec
    returncode: int | None
    output: NcuOutput
    results: dict[str, Any] | None
    stopped: str | None = None
    seconds: float = 0.0
    launched_at: float | None = None
    ended_at: float | None = None
    completed: bool = False  # stopped because its items had ended (``stop_when_done``)


class Interrupted(KeyboardInterrupt):
    """The parent was interrupted; the children stopped and left these outcomes."""

    def __init__(self, outcomes: list[ChildOutcome]) -> None:
        super().__init__("interrupted")
        self.outcomes = outcomes


#: Set by SIGTERM while children run; the poll loop then stops them as Ctrl-C does (a flag,
#: not an exception, so that it never lands half-way through starting or cleaning up).
_TERMINATED = threading.Event()


def _terminate(signum: int, frame: Any) -> None:
    _TERMINATED.set()


@dataclass
class _Child:
    spec: ChildSpec
    proc: subprocess.Popen[str]
    reader: StatusReader
    output: NcuOutput = field(default_factory=NcuOutput)
    thread: threading.Thread | None = None
    log: IO[str] | None = None
    started: float = field(default_factory=time.monotonic)
    launched_at: float = field(default_factory=time.time)
    ended_at: float | None = None
    deadline: float = 0.0
    pid: int | None = None
    done: int = 0
    failed: int = 0
    current: dict[str, Any] | None = None
    #: shapes and phases begun since the progress line last heard of them
    begun: list[str] = field(default_factory=list)
    interrupted_item: int | None = None
    stopped: str | None = None
    completed: bool = False
    stop_phase: int = 0
    stop_at: float = 0.0
    active_at: float = field(default_factory=time.monotonic)  # last output line or event

    def running(self) -> bool:
        if self.proc.poll() is None:
            return True
        if self.ended_at is None:
            self.ended_at = time.time()
        return False


def _pump(child: _Child) -> None:
    assert child.proc.stdout is not None
    for line in child.proc.stdout:
        child.active_at = time.monotonic()
        child.output.feed(line)
        if child.spec.echo is not None and child.completed:
            # what the command says once stopped after its chosen steps (torchrun's
            # traceback of the SIGTERM) is ours, not the script's: kept, not shown
            logger.debug("[%s, stopped] %s", child.spec.name, line.rstrip())
        elif child.spec.echo is not None:
            if not line.startswith(NCU_PROGRESS_LINES):
                child.spec.echo(line.rstrip("\n"))
        elif line.startswith(CHILD_LOG_PREFIX):
            logger.warning("[%s] %s", child.spec.name, line.rstrip())
        else:
            logger.debug("[%s] %s", child.spec.name, line.rstrip())
        _keep(child, line)
    _keep(child, None)


def _keep(child: _Child, line: str | None) -> None:
    """Write a line of the child's output to its log (None: flush it). A log that cannot
    be written (a full disk) is given up with one warning: the child's output is still
    read, so that it never blocks on a full pipe, and no thread dies with a traceback."""
    if child.log is None:
        return
    try:
        if line is None:
            child.log.flush()
        else:
            child.log.write(line)
    except OSError as err:
        log, child.log = child.log, None
        with contextlib.suppress(OSError):
            log.close()
        logger.warning("%s; the rest of %s's output is not kept",
                       write_error(Path(log.name), err), child.spec.name)


def _signal(pid: int | None, sig: int, *, group: bool = False) -> None:
    if pid is None:
        return
    try:
        if group:
            os.killpg(pid, sig)
        else:
            os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _start(spec: ChildSpec, cwd: str, deadline_s: float) -> _Child:
    spec.status_path.unlink(missing_ok=True)
    spec.result_path.unlink(missing_ok=True)
    log = open(spec.log_path, "w", encoding="utf-8") if spec.log_path else None  # noqa: SIM115
    logger.info("starting %s: %s", spec.name, subprocess.list2cmdline(spec.command))
    try:
        proc = subprocess.Popen(spec.command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                stdin=None if spec.echo else subprocess.DEVNULL, text=True,
                                errors="replace",
                                env=spec.env, cwd=cwd, start_new_session=True, bufsize=1)
    except BaseException:
        if log is not None:
            log.close()
        raise
    child = _Child(spec, proc, StatusReader(spec.status_path), log=log)
    child.deadline = child.started + deadline_s
    child.thread = threading.Thread(target=_pump, args=(child,), daemon=True,
                                    name=f"torch_nsight-{spec.name}")
    child.thread.start()
    return child


def _read_status(child: _Child) -> bool:
    changed = False
    for event in child.reader.poll():
        child.active_at = time.monotonic()
        kind = event.get("event")
        if kind == "start":
            child.pid = event.get("pid")
        elif kind == "phase" and child.current is not None:
            child.current["phase"] = event.get("phase")
            child.begun.append(describe_current(child.current))
            changed = True
        elif kind == "item_start":
            child.current = {**event, "started": time.monotonic()}
            changed = True
        elif kind == "item_end":
            child.done += 1
            if child.current and child.current.get("index") == event.get("index"):
                child.current = None
            status = event.get("status")
            if status != "ok":
                child.failed += 1
            # failures are logged once, with their error, when the sweep is assembled
            logger.info("%s: shape %s%s %s in %.1f s", child.spec.name, event.get("shape"),
                        f" ({event['variant']})" if event.get("variant") else "", status,
                        event.get("elapsed_s") or 0.0)
            changed = True
    return changed


def _stop(child: _Child, reason: str) -> None:
    if child.stopped is None:
        child.stopped = reason
        logger.warning("stopping %s: %s", child.spec.name, reason)
        child.stop_phase = 1
        child.stop_at = time.monotonic() + STOP_GRACE_S
        if child.pid is not None:
            _signal(child.pid, signal.SIGTERM)
        else:
            child.stop_at = time.monotonic()  # nothing to ask gently: escalate now


def _escalate(child: _Child, now: float) -> None:
    if child.stop_phase and now >= child.stop_at and child.running():
        if child.stop_phase == 1:
            logger.warning("%s did not stop; terminating its process group", child.spec.name)
            _signal(child.proc.pid, signal.SIGTERM, group=True)
            child.stop_phase, child.stop_at = 2, now + KILL_GRACE_S
        else:
            logger.warning("%s did not terminate; killing it", child.spec.name)
            _signal(child.proc.pid, signal.SIGKILL, group=True)
            child.stop_phase, child.stop_at = 3, now + 3600


def silence_s(item_timeout: float) -> float:
    """Seconds a child may show no sign of life: ``$TORCH_NSIGHT_SILENCE_S``, else
    :data:`SILENCE_S` or, when longer, the per-shape timeout and its grace (a long
    ``--timeout`` is for a shape that may be silent that long: a compile, a large model
    load). A bad value is logged and ignored."""
    default = max(SILENCE_S, item_timeout + ITEM_GRACE_S)
    text = os.environ.get(SILENCE_ENV)
    if text:
        try:
            value = float(text)
            if value > 0:
                return value
        except ValueError:
            pass
        logger.warning("%s=%r is not a positive number of seconds; using %.0f s",
                       SILENCE_ENV, text, default)
    return default


def _doing(child: _Child) -> str:
    """What the child was doing, for a stop's reason."""
    current = child.current
    if current is None:
        return "before its first shape (starting up)" if not child.done else "between shapes"
    phase = current.get("phase")
    return f"in shape {current.get('shape')}" + (f", {phase}" if phase else "")


def _watch(child: _Child, item_timeout: float, now: float, silence: float) -> None:
    if child.stopped is not None or not child.running():
        return
    if child.spec.stop_when_done and child.done >= child.spec.items:
        # nothing to save: the whole group (a wrapper's next command, what the script
        # started) gets SIGTERM, and SIGKILL after a short grace
        child.stopped, child.completed = f"its {child.done} item(s) ended", True
        logger.info("stopping %s: %s", child.spec.name, child.stopped)
        _signal(child.proc.pid, signal.SIGTERM, group=True)
        child.stop_phase, child.stop_at = 2, now + DONE_GRACE_S
        return
    if now > child.deadline:
        _stop(child, f"it ran past its overall timeout ({child.deadline - child.started:.0f} s)")
        return
    if now - child.active_at > silence:
        _stop(child, f"it showed no sign of life (no output, no progress) for {silence:.0f} s "
                     f"{_doing(child)}; its last output lines:\n"
                     f"{child.output.last_lines(12) or '(none)'}")
        return
    current = child.current
    if current is None:
        return
    ran = now - current["started"]
    if ran > item_timeout and child.interrupted_item != current.get("index"):
        logger.warning("%s: shape %s passed its %.0f s timeout%s; interrupting it",
                       child.spec.name, current.get("shape"), item_timeout,
                       f" ({current['phase']})" if current.get("phase") else "")
        child.interrupted_item = current.get("index")
        _signal(child.pid, signal.SIGINT)
    elif ran > item_timeout + ITEM_GRACE_S:
        _stop(child, f"shape {current.get('shape')} did not stop at its timeout")


def run_children(specs: list[ChildSpec], *, item_timeout: float, startup_s: float,
                 cwd: str, progress: Progress | None = None) -> list[ChildOutcome]:
    """Run the children concurrently until they end; return how each ended.

    Args:
        specs: the children.
        item_timeout: seconds one (variant, shape) item may take.
        startup_s: seconds allowed on top of ``item_timeout`` x items per child.
        cwd: their working directory.
        progress: the progress bar to update (None: none).

    Returns:
        One outcome per spec, in order.

    Raises:
        Interrupted: the parent was interrupted (Ctrl-C or SIGTERM), after the children
            stopped; it holds their outcomes.
        KeyboardInterrupt: interrupted twice: the children were killed.
    """
    children: list[_Child] = []
    interrupted = False
    silence = silence_s(item_timeout)
    main = threading.current_thread() is threading.main_thread()
    _TERMINATED.clear()
    previous = signal.signal(signal.SIGTERM, _terminate) if main else None
    try:
        for spec in specs:
            deadline = (item_timeout * spec.items + startup_s if spec.deadline_s is None
                        else spec.deadline_s)
            children.append(_start(spec, cwd, deadline))
        while any(c.running() for c in children):
            try:
                time.sleep(POLL_S)
                if _TERMINATED.is_set() and not interrupted:
                    _TERMINATED.clear()
                    raise KeyboardInterrupt
                now = time.monotonic()
                for child in children:
                    _read_status(child)
                    _watch(child, item_timeout, now, silence)
                    _escalate(child, now)
                if progress is not None:
                    _show(progress, children)
            except KeyboardInterrupt:
                if interrupted:
                    for child in children:
                        _signal(child.proc.pid, signal.SIGKILL, group=True)
                    raise
                interrupted = True
                for child in children:
                    _stop(child, "the parent was interrupted")
    finally:
        if main:  # (None: the handler was not set from Python; the default then)
            signal.signal(signal.SIGTERM, previous if previous is not None else signal.SIG_DFL)
        for child in children:
            if child.running() or child.spec.stop_when_done:  # (and what it left running)
                _signal(child.proc.pid, signal.SIGKILL, group=True)
            child.proc.wait()
            if child.thread is not None:
                child.thread.join(timeout=10)
            if child.log is not None:
                child.log.close()
            _read_status(child)
        if progress is not None:
            _show(progress, children)
            progress.close()
    outcomes = [ChildOutcome(c.spec, c.proc.returncode, c.output,
                             load_results(c.spec.result_path), c.stopped,
                             round(time.monotonic() - c.started, 3), c.launched_at,
                             c.ended_at or time.time(), c.completed) for c in children]
    if interrupted:
        raise Interrupted(outcomes)
    return outcomes


def _show(progress: Progress, children: list[_Child]) -> None:
    progress.update(done=sum(c.done for c in children), failed=sum(c.failed for c in children),
                    kernels=sum(c.output.kernels_profiled for c in children),
                    current=[describe_current(c.current) for c in children
                             if c.current and c.running()],
                    begun=[doing for c in children for doing in c.begun])
    for child in children:
        child.begun.clear()


def load_results(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, json.JSONDecodeError) as err:
        logger.warning("could not read the child's results %s: %s", path, err)
        return None
