"""A user's own command under ncu (``torch-nsight profile``), on the sweep's engine; also
without ncu, its chosen steps recorded by PyTorch's profiler (``profile --timeline``).

Plan -> launch -> settle -> load, as :func:`torch_nsight.sweep` runs: :func:`plan_script`
checks what to run and builds the ``ncu`` command (metric set filtered to what this ncu knows,
only the chosen steps' ``measure`` range, NCCL kernels left out of replay in a run of several
processes, replicas left out); :func:`run_script` starts it as one more kind of child with
:func:`~torch_nsight.collect.parent.launch.run_children` (its own process group, the timeout,
Ctrl-C, the progress line fed by the steps' status lines and ncu's line per kernel), then
writes the run's manifest next to the report (``report.run.json``: the command, the steps with
their kernels and time, the phases) and loads the report.

The script is the child: :func:`torch_nsight.step` writes its status lines (the steps chosen
with ``--steps``), and :func:`torch_nsight.instrument` records the calls table and checks the
identical siblings on its own under the profiler.
"""

from __future__ import annotations

import logging
import math
import os
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from torch_nsight import formats
from torch_nsight.collect.parent import engine
from torch_nsight.collect.parent.engine import Manifest, Plan, Profiler, Settled, Stamps
from torch_nsight.collect.parent.launch import ChildOutcome, ChildSpec
from torch_nsight.collect.parent.progress import Progress
from torch_nsight.collect.shared import ncu as ncu_cli
from torch_nsight.environment import ScriptEnv, Steps
from torch_nsight.errors import NothingProfiledError, TorchNsightError
from torch_nsight.metrics import SINGLE_PASS_SETS
from torch_nsight.record import CollectionRecord
from torch_nsight.status import RECURRENT_EVENT, StatusReader, recurrent_modules

if TYPE_CHECKING:
    from torch_nsight.profile import Profile

logger = logging.getLogger(__name__)

#: ncu's kernel filter that leaves NCCL's communication kernels out (see leaves_out_nccl).
NOT_NCCL = "regex:^(?!nccl)"


@dataclass(frozen=True)
class ScriptPlan(Plan):
    """A user's command to run under ncu, checked: the command's kind of
    :class:`~torch_nsight.collect.parent.engine.Plan` (one child, the command; what it
    yields is its steps' status lines; its manifest ``report.run.json``).

    Attributes:
        command: the user's command (``python train.py ...``).
        ncu_command: the whole argument list, ncu first (the command alone for a timeline).
        metric_set: the metric set's name; ``metrics`` the names passed to ncu.
        report: the ``.ncu-rep`` to write, or a timeline's manifest (its ``.log``,
            ``.run.json`` and status file beside it).
        script: what the command is told (the steps, the status file, the replicas, the
            timeline's folder), written into its environment.
        environ: the environment it starts from (``script`` written over it: :attr:`env`).
        timeout: seconds the command may run (None: no limit).
        expected_kernels: kernels the run should profile, when known before it starts.
        quiet: no progress line.
    """

    command: list[str]
    ncu_command: list[str]
    metric_set: str
    metrics: list[str]
    report: Path
    script: ScriptEnv
    environ: dict[str, str]
    timeout: float | None
    expected_kernels: int | None
    quiet: bool = False
    launches: Mapping[str, Any] | None = None  # --replicate-launches: the launch list's pass
    entered: float = field(default_factory=time.time)

    @property
    def env(self) -> dict[str, str]:
        """The command's whole environment."""
        return self.script.environment(self.environ)

    @property
    def steps(self) -> Steps | None:
        """The chosen steps, or None for every kernel."""
        return self.script.steps

    @property
    def n_steps(self) -> int | None:
        """How many steps are chosen (None: open-ended or no ``--steps``)."""
        return None if self.steps is None else self.steps.count

    @property
    def replicate(self) -> bool:
        """Identical siblings are profiled once."""
        return self.script.replicate

    @property
    def timeline(self) -> bool:
        """No ncu: the chosen steps are recorded by PyTorch's profiler into the report's
        folder (``profile --timeline``)."""
        return self.script.timeline is not None

    @property
    def manifest(self) -> Path:
        """The run's manifest, next to the report (``report.run.json``)."""
        return self.report.with_suffix(formats.RUN_SUFFIX)

    @property
    def log(self) -> Path:
        """ncu's whole output, the line per kernel included."""
        return self.report.with_suffix(".log")

    # the command's parts of the engine's route (collect/parent/engine.py)

    @property
    def work(self) -> Path:
        return self.report.parent

    @property
    def keep(self) -> bool:
        return True

    @property
    def executor(self) -> Any:
        return None

    @property
    def profiler(self) -> Profiler | None:
        return "torch.profiler" if self.timeline else "ncu"

    def progress(self) -> Progress:
        if self.timeline:
            return Progress("step", self.n_steps, steps=self.n_steps, quiet=self.quiet)
        return Progress("kernel", self.expected_kernels, steps=self.n_steps, quiet=self.quiet)

    def children(self, private: Path | None) -> list[ChildSpec]:
        """The command, its output echoed (above the engine's progress line)."""
        return [ChildSpec(self.report.stem, self.ncu_command, self.env,
                          _status_path(self.report), self.report.with_suffix(".result.json"),
                          self.report, self.log, items=self.n_steps or 1,
                          deadline_s=math.inf if self.timeout is None else self.timeout,
                          echo=_echo)]

    def yielded(self, outcome: ChildOutcome) -> list[dict[str, Any]]:
        """The chosen steps' status lines (the status file goes once read)."""
        if outcome.stopped:
            logger.warning("stopped the command: %s", outcome.stopped)
        status = _status_path(self.report)
        keys = ("index", "status", "elapsed_s", "modules", "calls", "replicas", "op_replicas")
        events = StatusReader(status).poll()
        steps: list[dict[str, Any]] = [{k: e.get(k) for k in keys if k in e}
                                       for e in events if e.get("event") == "item_end"]
        steps += [{"index": None, "status": RECURRENT_EVENT, "modules": e.get("modules")}
                  for e in events if e.get("event") == RECURRENT_EVENT][:1]  # the probe's
        status.unlink(missing_ok=True)
        return steps

    def check(self, outcome: ChildOutcome, items: list[dict[str, Any]]) -> str | None:
        found = [i for i in items if i.get("status") == RECURRENT_EVENT]
        if found and self.script.probe_launches:
            raise RecurrentLayers(recurrent_modules(found[0].get("modules")))
        if self.timeline:
            if not self.report.is_file():
                raise NothingProfiledError(f"the command wrote no timeline (exit status "
                                           f"{outcome.returncode}): {why_nothing(self.steps)}")
        else:
            ncu_cli.raise_for_output(outcome.output, report_exists=self.report.is_file(),
                                     returncode=outcome.returncode,
                                     why_nothing=why_nothing(self.steps))
        return self.report.name

    def judge(self, items: list[dict[str, Any]], children: list[dict[str, Any]],
              errors: list[tuple[str, TorchNsightError]]
              ) -> tuple[list[dict[str, Any]], TorchNsightError | None]:
        return [], errors[0][1] if errors else None

    def describe(self, settled: Settled, stamps: Stamps, timing: dict[str, Any]) -> Manifest:
        """The run's record (what the next run's ETA reads), its phases: start-up (until
        the first profiled kernel), profiling, loading."""
        (outcome,) = settled.outcomes
        kernels = outcome.output.kernels_profiled
        ran = [s for s in settled.items if s["status"] == "ok"]
        ended = outcome.ended_at or stamps.settled
        first = outcome.output.first_profiled_at or ended
        steps = None if self.steps is None else str(self.steps)
        summary = {"command": self.command, "steps": steps,
                   "metric_set": self.metric_set, "replicate": self.replicate,
                   "metrics": self.metrics, "ncu_command": self.ncu_command,
                   "exit_status": outcome.returncode, "kernels_profiled": kernels,
                   "replicated_launches": None if self.launches is None else dict(self.launches),
                   "kernels_per_step": round(kernels / len(ran), 1) if ran and kernels
                   else None,  # per profiled step
                   "steps_profiled": settled.items,
                   "phases_s": {"start": round(first - stamps.launched, 3),
                                "profiling": round(ended - first, 3),
                                "load": round(stamps.finished - stamps.settled, 3)},
                   "created": settled.created}
        record = CollectionRecord(
            options={"profiler": self.profiler, "metric_set": self.metric_set,
                     "steps": steps, "replicate": self.replicate},
            items=tuple(settled.items), commands={outcome.spec.name: outcome.spec.command},
            output_dir=str(self.work), created=settled.created, timing=timing)
        return Manifest(self.manifest, record, settled.children, summary=summary,
                        required=False)

    def load(self, manifest: Manifest) -> Any:
        from torch_nsight.loading import load

        return load(self.report.parent, cache=False) if self.timeline else load(self.report)

    def finish(self, loaded: Any, manifest: Manifest) -> ScriptRun:
        status = manifest.summary["exit_status"]
        return ScriptRun(0 if status is None else status, loaded, manifest.document())

    def interrupted(self, outcomes: list[ChildOutcome]) -> None:
        if self.timeline:
            logger.warning("interrupted: no timeline was written (%s holds the command's "
                           "output)", self.report.parent)
        else:
            logger.warning("interrupted: what ncu profiled until then is in %s", self.report)


class RecurrentLayers(TorchNsightError):
    """The probe of ``profile``'s automatic launch replication ended the command: its models
    hold cuDNN recurrent layers (``modules``), whose launches ncu should sample from a launch
    list (:mod:`torch_nsight.capture.script.recurrent`)."""

    def __init__(self, modules: list[str]) -> None:
        super().__init__(f"the command's models hold cuDNN recurrent layers "
                         f"({', '.join(modules) or 'unnamed'}): profile it with "
                         "--replicate-launches")
        self.modules = modules


@dataclass(frozen=True)
class ScriptRun:
    """How the command ran: its exit status, the loaded profile, the manifest's record."""

    exit_status: int
    profile: Profile
    record: dict[str, Any]


def world_size(environ: Mapping[str, str]) -> int:
    """The number of processes of the distributed run (torchrun's ``WORLD_SIZE``), or 1."""
    value = environ.get("WORLD_SIZE", "1").strip()
    return int(value) if value.isdigit() else 1


def leaves_out_nccl(metric_set: str, environ: Mapping[str, str]) -> bool:
    """Whether NCCL kernels must be left out of profiling: in a run of several processes,
    replaying a communication kernel waits for peers that do not replay it (ncu hangs);
    a single-pass set (``duration``) replays nothing and keeps them."""
    return world_size(environ) > 1 and metric_set not in SINGLE_PASS_SETS


def plan_script(command: Sequence[str], report: Path, *, ncu: str, metric_set: str,
                steps: Steps | None = None, kernel_name: str | None = None,
                launch_skip: int | None = None, launch_count: int | None = None,
                ncu_args: Sequence[str] = (), replicate: bool = True,
                known: frozenset[str] | None = None, timeout: float | None = None,
                quiet: bool = False, environ: Mapping[str, str] | None = None,
                launches: Mapping[str, Any] | None = None,
                kernel_id: str | None = None, probe_launches: bool = False) -> ScriptPlan:
    """Check a command to profile and build its ``ncu`` command line.

    Args:
        command: the user's command.
        report: the report to write.
        ncu: the ``ncu`` executable.
        metric_set: the metric set's name.
        steps: the steps to profile, or None for every kernel.
        kernel_name: only kernels whose name matches this regex (ncu ``-k``).
        launch_skip, launch_count: ncu's ``--launch-skip`` / ``--launch-count``.
        ncu_args: more ncu arguments.
        replicate: identical siblings, and (but with a single-pass set) the first chosen
            step's repeated op calls, profiled once (``capture.replicas.op_calls``).
        known: the metric base names this ncu knows (None: pass every metric).
        timeout: seconds the command may run.
        quiet: no progress line.
        environ: the environment to start from (default ``os.environ``).
        launches, kernel_id: ``--replicate-launches``: the launch list's pass (for the
            manifest) and ncu's ``--kernel-id`` (identical siblings are then not replicated:
            the launch list's groups stand in for them).
        probe_launches: the script ends itself at its first step where its models hold cuDNN
            recurrent layers, and the run raises :class:`RecurrentLayers` (``profile``'s
            automatic ``--replicate-launches``).
    """
    environ = dict(os.environ if environ is None else environ)
    chosen = ncu_cli.resolve_metric_set(metric_set)
    extra: list[str] = []
    if kernel_name:
        extra += ["-k", f"regex:{kernel_name}", "--kernel-name-base", "demangled"]
    elif leaves_out_nccl(metric_set, environ):
        extra += ["-k", NOT_NCCL]
    if kernel_id is not None:
        extra += ["--kernel-id", kernel_id]
        replicate = False
    if launch_skip is not None:
        extra += ["--launch-skip", str(launch_skip)]
    if launch_count is not None:
        extra += ["--launch-count", str(launch_count)]
    extra += ncu_cli.check_extra_args(ncu_args)
    metrics = (list(chosen.metrics) if known is None
               else ncu_cli.filter_metrics(chosen.metrics, known))
    replicate = replicate and steps is not None
    if replicate and steps is not None and steps.first == 0:
        logger.info("--steps %s starts at step 0: identical blocks are checked on the step "
                    "before the first chosen one, so every kernel is profiled", steps)
    built = ncu_cli.build_command(ncu, report=report.with_suffix(""), metric_set=chosen,
                                  app=list(command), metrics=metrics,
                                  exclude_replicas=replicate, extra_args=extra,
                                  measured_only=steps is not None)
    script = ScriptEnv(steps=steps, status=_status_path(report), replicate=replicate,
                       carry_last=kernel_id is not None,
                       replicate_ops=replicate and chosen.name not in SINGLE_PASS_SETS,
                       probe_launches=probe_launches and kernel_id is None)
    n_steps = None if steps is None else steps.count
    expected = (launch_count if launch_count is not None else launches["profiled"] if launches
                else _expected(report, command, metric_set, n_steps, replicate))
    return ScriptPlan(command=list(command), ncu_command=built, metric_set=chosen.name,
                      metrics=metrics, report=report, script=script, environ=environ,
                      timeout=timeout, expected_kernels=expected, quiet=quiet,
                      launches=launches)


def plan_timeline(command: Sequence[str], folder: Path, *, steps: Steps,
                  timeout: float | None = None, quiet: bool = False,
                  environ: Mapping[str, str] | None = None) -> ScriptPlan:
    """The command run without ncu, its chosen steps recorded by PyTorch's profiler into
    ``folder`` (``profile --timeline``, :mod:`torch_nsight.capture.script.profiler_steps`)."""
    report = folder / formats.TIMELINE_MANIFEST
    script = ScriptEnv(timeline=folder.resolve(), steps=steps, status=_status_path(report))
    return ScriptPlan(command=list(command), ncu_command=list(command), metric_set="timeline",
                      metrics=[], report=report, script=script,
                      environ=dict(os.environ if environ is None else environ),
                      timeout=timeout, expected_kernels=None, quiet=quiet)


def _echo(line: str) -> None:
    """A line of the command's output, where no progress line shows it."""
    sys.stderr.write(line + "\n")


def _status_path(report: Path) -> Path:
    return report.with_suffix(".status.jsonl")


def _expected(report: Path, command: Sequence[str], metric_set: str, n_steps: int | None,
              replicate: bool) -> int | None:
    """Kernels to expect from the last run of the same command into the same folder (one
    that ended well: a failed or interrupted run's count says nothing of a whole run)."""
    last = engine.last_run(report.with_suffix(formats.RUN_SUFFIX))
    if last is None or last.get("exit_status") != 0:
        return None
    per_step = last.get("kernels_per_step")
    if (not per_step or not n_steps or last.get("command") != list(command)
            or last.get("metric_set") != metric_set or last.get("replicate") != replicate):
        return None
    return round(per_step * n_steps)


def run_script(plan: ScriptPlan) -> ScriptRun:
    """Launch the command under ncu, settle what it left, load the report (the engine's
    route, :func:`torch_nsight.collect.parent.engine.run`).

    Returns:
        The command's exit status (ncu passes the script's on), the profile, the record
        written to the manifest.

    Raises:
        KeyboardInterrupt: interrupted (the partial report is kept: ``report`` reads it).
        NcuNotFoundError, CounterPermissionError, NothingProfiledError, TorchNsightError:
            as ncu's output calls for.
    """
    ran: ScriptRun = engine.run(plan)
    return ran


def why_nothing(steps: Steps | None) -> str:
    """The likely reason a run chose no kernel (``steps``: its ``--steps``)."""
    if steps is not None:
        return (f"No kernel ran inside a step chosen by --steps {steps}: does the loop "
                "mark its steps with `with torch_nsight.step():`, and does it run that many "
                "steps?")
    return ("No kernel was profiled: does the command launch CUDA kernels on a GPU, and do "
            "-k / --launch-skip / --launch-count leave any?")
