"""The collection engine: one route for every kind of run the parent watches.

A sweep (:func:`torch_nsight.sweep`), a user's command under ncu (``torch-nsight profile``)
and its timeline (``profile --timeline``) are kinds of one :class:`Plan`, built once at their
front door, and :func:`run` takes each along the same phases::

    plan ──▶ run ──▶ (rewrite) ──▶ launch ──▶ settle ──▶ load ──▶ finish
             │        a focused     run_children  judge the      the kind's
             │        sweep's first or an         children,      reader
             │        pass          executor      write the one
             │                                    manifest record
             └─ one place for phase stamps, Ctrl-C (what finished is written down) and
                the temporary folders

What differs between the kinds is the plan's: what to launch (:meth:`Plan.children`), under
which profiler (:attr:`Plan.profiler`), what each child yields (:meth:`Plan.yielded`), which
report it left (:meth:`Plan.check`), what ends the run (:meth:`Plan.judge`), what the
manifest says (:meth:`Plan.describe`), how it is read back (:meth:`Plan.load`) and what the
caller gets (:meth:`Plan.finish`).
"""

from __future__ import annotations

import abc
import contextlib
import dataclasses
import json
import logging
import os
import shutil
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from torch_nsight import formats
from torch_nsight.collect.parent.launch import ChildOutcome, ChildSpec, Interrupted, run_children
from torch_nsight.collect.parent.outcomes import check_children, warm_the_reader
from torch_nsight.collect.parent.progress import Progress
from torch_nsight.collect.shared import timing as timings
from torch_nsight.errors import TorchNsightError
from torch_nsight.record import CollectionRecord, now

logger = logging.getLogger(__name__)

#: The torch_nsight package folder (found without importing the package root).
_PACKAGE = Path(__file__).resolve().parents[2]
#: What profiles a run's children: Nsight Compute, PyTorch's profiler, or nothing (a dry run).
Profiler = Literal["ncu", "torch.profiler"]


@dataclass(frozen=True)
class Stamps:
    """When a run passed each phase (``time.time()``): entered (its front door), launched
    (its first child started), settled (its last child ended), finished (its profile read)."""

    entered: float
    launched: float
    settled: float
    finished: float


@dataclass(frozen=True)
class Settled:
    """What the children left, judged, before anything is loaded.

    Attributes:
        outcomes: how each child ended.
        items: what they yielded (a sweep's (variant, shape) items, a command's steps),
            with what the parent knows added.
        children: per child its name, usable report file name (None: none), exit status...
        problems: children whose report cannot be used (child, error).
        per_child: each child's phases (:func:`~torch_nsight.collect.shared.timing.child_phases`).
        created: when it was settled (the manifest's ``created``).
    """

    outcomes: tuple[ChildOutcome, ...]
    items: list[dict[str, Any]]
    children: list[dict[str, Any]]
    problems: list[dict[str, Any]]
    per_child: list[dict[str, Any]]
    created: str = field(default_factory=now)


@dataclass(frozen=True)
class Manifest:
    """The one manifest record every kind writes (``sweep.json``, ``report.run.json``).

    Attributes:
        path: where it is written.
        record: what was asked and how each item ended, with the phases' timing.
        children: per child: name, usable report, exit status, device, settings...
        replication: the verified sibling groups, by variant and shape.
        calls: the calls table's rows, by variant and shape.
        settings: the PyTorch settings the children ran with.
        summary: the kind's own fields at the top of the file (a command's ``command``,
            ``steps``, ``kernels_profiled``, ``phases_s``...).
        tag: the file's ``kind`` (None: untagged, as ``report.run.json`` always was).
        required: loading reads it (a sweep's), so failing to write it is an error; else
            a warning.
    """

    path: Path
    record: CollectionRecord
    children: Sequence[dict[str, Any]] = ()
    replication: Sequence[dict[str, Any]] = ()
    calls: Sequence[dict[str, Any]] = ()
    settings: dict[str, Any] = field(default_factory=dict)
    summary: dict[str, Any] = field(default_factory=dict)
    tag: str | None = None
    required: bool = True

    def document(self) -> dict[str, Any]:
        """The file's JSON document."""
        tag = {} if self.tag is None else {"kind": self.tag, "format": formats.SWEEP_FORMAT}
        return {**tag, **self.summary, "record": self.record.to_dict(),
                "children": list(self.children), "replication": list(self.replication),
                "calls": list(self.calls), "settings": self.settings}

    def write(self) -> None:
        """Write it whole (atomically); a manifest loading does not need is only warned
        about when it cannot be written."""
        try:
            formats.write_json(self.path, self.document())
        except OSError as err:
            if self.required:
                raise
            logger.warning("could not write %s: %s", self.path, err)


class Plan(abc.ABC):
    """A run to make, checked: one kind of this for a sweep, a command, a timeline.

    Attributes:
        quiet: no progress line.
        entered: when its front door was called (``time.time()``).
        work: the folder the children write into; ``keep`` whether it outlives the run
            (else it is removed at the end).
        executor: a ``submit()``-style executor to run the children on (None: local
            processes).
    """

    quiet: bool
    entered: float
    if TYPE_CHECKING:  # fields of some kinds, properties of others
        @property
        def work(self) -> Path: ...

        @property
        def keep(self) -> bool: ...

        @property
        def executor(self) -> Any: ...

    @property
    def profiler(self) -> Profiler | None:
        """What profiles the children (None: nothing, a dry run)."""
        return None

    @property
    def item_timeout(self) -> float:
        """Seconds one item may take (``inf``: no limit)."""
        return float("inf")

    @property
    def startup_s(self) -> float:
        """Seconds a child gets on top of its items' time."""
        return 0.0

    @property
    def chose_devices(self) -> bool:
        """The caller chose the GPUs (an executor's job then gets one of them)."""
        return False

    def private_dir(self) -> Path | None:
        """A folder for files only this run reads (a job's pickles), removed at the end."""
        return None

    def rewrite(self) -> Plan:
        """The plan to launch: this one, or one rewritten from a first pass."""
        return self

    @abc.abstractmethod
    def progress(self) -> Progress:
        """The progress line."""

    @abc.abstractmethod
    def children(self, private: Path | None) -> list[ChildSpec]:
        """What to launch (before the progress line shows: a job that cannot be pickled
        fails here)."""

    @abc.abstractmethod
    def yielded(self, outcome: ChildOutcome) -> list[dict[str, Any]]:
        """What one child yielded (its items or steps)."""

    @abc.abstractmethod
    def check(self, outcome: ChildOutcome, items: list[dict[str, Any]]) -> str | None:
        """The file name of the child's usable report (None: it makes none).

        Raises:
            TorchNsightError: the report cannot be used (the message says why).
        """

    @abc.abstractmethod
    def judge(self, items: list[dict[str, Any]], children: list[dict[str, Any]],
              errors: list[tuple[str, TorchNsightError]]
              ) -> tuple[list[dict[str, Any]], TorchNsightError | None]:
        """The problems to write down and the error that ends the run, if any."""

    @abc.abstractmethod
    def describe(self, settled: Settled, stamps: Stamps, timing: dict[str, Any]) -> Manifest:
        """The manifest record of the run (built again with the final timing)."""

    @abc.abstractmethod
    def load(self, manifest: Manifest) -> Any:
        """Read what the run left."""

    @abc.abstractmethod
    def finish(self, loaded: Any, manifest: Manifest) -> Any:
        """What the caller gets, from the loaded profile and the final manifest."""

    def interrupted(self, outcomes: list[ChildOutcome]) -> None:
        """Say what an interrupted run left."""
        logger.warning("interrupted: what was profiled until then is in %s", self.work)


def run(plan: Plan) -> Any:
    """Run a plan: launch its children, settle what they left, load it.

    Returns:
        What :meth:`Plan.finish` makes: a sweep's Profile, a command's run.

    Raises:
        KeyboardInterrupt: interrupted (what finished is written down first).
        TorchNsightError: as the plan judges what its children left.
    """
    with _folders(plan) as private:
        plan = plan.rewrite()
        specs = plan.children(private)
        progress = plan.progress()
        # a child that echoes its output (a user's command) writes above the progress line
        specs = [s if s.echo is None else dataclasses.replace(s, echo=progress.write)
                 for s in specs]
        if plan.profiler == "ncu":
            warm_the_reader()
        launched = time.time()
        try:
            outcomes = launch(plan, specs, progress)
        except Interrupted as stop:
            _keep_what_finished(plan, stop.outcomes, launched)
            raise KeyboardInterrupt from None
        stamps = Stamps(plan.entered, launched, time.time(), time.time())
        settled, manifest = settle(plan, outcomes, stamps)
        loaded = plan.load(manifest)
        final = _manifest(plan, settled, dataclasses.replace(stamps, finished=time.time()))
        if plan.keep:  # the record gets the final timing, loading included
            final.write()
        return plan.finish(loaded, final)


@contextlib.contextmanager
def _folders(plan: Plan) -> Iterator[Path | None]:
    """The run's private folder; both it and a temporary output folder go at the end."""
    private = None
    try:
        private = plan.private_dir()
        yield private
    finally:
        if private is not None:
            shutil.rmtree(private, ignore_errors=True)
        if not plan.keep:
            shutil.rmtree(plan.work, ignore_errors=True)


def launch(plan: Plan, specs: list[ChildSpec], progress: Progress) -> list[ChildOutcome]:
    """Run the children (local processes, or an executor's jobs) with the progress line.

    Raises:
        Interrupted: Ctrl-C or SIGTERM; it holds what the stopped children left.
    """
    if plan.executor is None:
        return run_children(specs, item_timeout=plan.item_timeout, startup_s=plan.startup_s,
                            cwd=os.getcwd(), progress=progress)
    from torch_nsight.collect.parent.remote import run_with_executor

    return run_with_executor(specs, plan.executor, item_timeout=plan.item_timeout,
                             startup_s=plan.startup_s, cwd=os.getcwd(),
                             chose_devices=plan.chose_devices, progress=progress)


def settle(plan: Plan, outcomes: Sequence[ChildOutcome], stamps: Stamps
           ) -> tuple[Settled, Manifest]:
    """Judge what the children left and write the manifest (what failed is written down
    before the error that ends the run is raised).

    Raises:
        CounterPermissionError: counters not permitted.
        TorchNsightError: what :meth:`Plan.judge` decides ends the run.
    """
    items, children, errors = check_children(outcomes, plan.yielded, plan.check)
    problems, fatal = plan.judge(items, children, errors)
    per_child = [{"name": o.spec.name, "ended_at": o.ended_at,
                  **timings.child_phases(o.launched_at, o.ended_at, o.results)}
                 for o in outcomes]
    settled = Settled(tuple(outcomes), items, children, problems, per_child)
    manifest = _manifest(plan, settled, stamps)
    manifest.write()
    if fatal is not None:
        raise fatal
    return settled, manifest


def _manifest(plan: Plan, settled: Settled, stamps: Stamps) -> Manifest:
    """The plan's manifest record with the timing of ``stamps`` (the one place it is made)."""
    timing = timings.breakdown(entered=stamps.entered, launched=stamps.launched,
                               settled=stamps.settled, finished=stamps.finished,
                               children=settled.per_child)
    return plan.describe(settled, stamps, timing)


def _keep_what_finished(plan: Plan, outcomes: list[ChildOutcome], launched: float) -> None:
    """An interrupted run: write down what the stopped children left (a kept folder only),
    so that loading it reads every finished item; then say so."""
    if plan.keep:
        stamp = time.time()
        with contextlib.suppress(TorchNsightError):  # nothing finished: the manifest says so
            settle(plan, outcomes, Stamps(plan.entered, launched, stamp, stamp))
    plan.interrupted(outcomes)


def last_run(path: Path) -> dict[str, Any] | None:
    """The manifest a previous run left at ``path`` (None: none, or not readable)."""
    try:
        last = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return last if isinstance(last, dict) else None


def child_env(visible_devices: str | None) -> dict[str, str]:
    """A child's environment: ours, with torch_nsight importable and the GPU chosen."""
    env = dict(os.environ)
    root = str(_PACKAGE.parent)
    env["PYTHONPATH"] = os.pathsep.join([root, *filter(None, [env.get("PYTHONPATH")])])
    env["PYTHONUNBUFFERED"] = "1"
    if visible_devices is not None:
        env["CUDA_VISIBLE_DEVICES"] = visible_devices
    return env
