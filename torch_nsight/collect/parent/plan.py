"""The plan of a sweep: its options checked and resolved into one typed record, the sweep's
kind of :class:`~torch_nsight.collect.parent.engine.Plan`.

:func:`plan_from` is the first phase of :func:`torch_nsight.sweep` (plan -> run -> launch ->
settle -> load, :mod:`~torch_nsight.collect.parent.engine`): it validates every option
(``TypeError``/``ValueError`` naming it), picks the metric set, finds ``ncu`` and the metrics
it knows, builds the job the children run and decides where the files go. The engine's
later phases read only the :class:`SweepPlan`, whose methods say what is particular to a
sweep: one child per GPU (or per shape, on an executor), the items each writes in its
result file, the manifest ``sweep.json`` and the directory read back
(:mod:`~torch_nsight.collect.parent.sweep_kind`).
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torch_nsight import formats
from torch_nsight.collect.parent.engine import (
    Manifest,
    Plan,
    Profiler,
    Settled,
    Stamps,
    child_env,
)
from torch_nsight.collect.parent.launch import ChildOutcome, ChildSpec
from torch_nsight.collect.parent.options import SweepOptions
from torch_nsight.collect.parent.outcomes import check_report, child_items, judge
from torch_nsight.collect.parent.progress import Progress
from torch_nsight.collect.shared import job as jobs
from torch_nsight.collect.shared import ncu as ncu_cli
from torch_nsight.collect.shared.arguments import (
    check_make_inputs,
    check_variants,
    is_module,
    user_settings,
)
from torch_nsight.errors import TorchNsightError
from torch_nsight.metrics import (
    DEFAULT_METRIC_SET,
    DEFAULT_METRIC_SET_WITHOUT_CALLS,
    MetricSet,
)

logger = logging.getLogger(__name__)

LARGE_MODEL_BYTES = 2 << 30
STARTUP_S = 300.0


@dataclass(frozen=True)
class SweepPlan(Plan):
    """Everything a sweep runs with, checked: what the launch, settle and load phases read.

    Attributes:
        job: what the children run (variants, shapes, inputs, settings).
        metric_set: the resolved metric set; ``metrics`` the names this ncu knows (None in a
            dry run).
        ncu: the ``ncu`` executable, or None for a dry run.
        ncu_args: the user's extra ncu arguments, checked.
        devices: the GPUs asked for (None: the default one); ``visible`` their
            ``CUDA_VISIBLE_DEVICES`` values.
        timeout: seconds allowed per (variant, shape).
        quiet: no progress bar.
        executor: a ``submit()``-style executor, or None for local children.
        derive: columns to derive from each row and its shape, or None.
        work: the output directory; ``keep`` whether it outlives the sweep.
        options: the options as the manifest records them.
        entered: when the sweep was called (``time.time()``).
        focus: the share of GPU time whose kernels ncu profiles, chosen by a first pass
            (:meth:`rewrite`), or None (every kernel, or already chosen).
    """

    job: jobs.Job
    metric_set: MetricSet
    metrics: list[str] | None
    ncu: str | None
    ncu_args: list[str]
    devices: Sequence[int | str] | None
    visible: list[str | None]
    timeout: float
    quiet: bool
    executor: Any
    derive: Mapping[str, Callable[..., Any]] | None
    work: Path
    keep: bool
    options: dict[str, Any]
    entered: float
    focus: float | None = None

    @property
    def shape_labels(self) -> list[str]:
        """The shapes' labels, in order."""
        return [label for label, _ in self.job.shapes]

    def build_ncu_command(self, report: Path, app: list[str]) -> list[str]:
        """The ``ncu`` argument list that profiles ``app`` into ``report``."""
        assert self.ncu is not None
        return ncu_cli.build_command(self.ncu, report=report, metric_set=self.metric_set,
                                     metrics=self.metrics, app=app,
                                     exclude_replicas=self.job.replicate,
                                     extra_args=self.ncu_args)

    # the sweep's parts of the engine's route (collect/parent/engine.py)

    @property
    def profiler(self) -> Profiler | None:
        return None if self.ncu is None else "ncu"

    @property
    def item_timeout(self) -> float:
        return self.timeout

    @property
    def startup_s(self) -> float:
        return STARTUP_S

    @property
    def chose_devices(self) -> bool:
        return self.devices is not None

    def private_dir(self) -> Path:
        """The job files: private to this user; an executor's workers read them where they
        read and write the reports."""
        if self.executor is None:
            return jobs.make_private_dir()
        private = self.work / ".jobs"
        shutil.rmtree(private, ignore_errors=True)  # a crashed run's job files
        private.mkdir(mode=0o700)
        return private

    def rewrite(self) -> Plan:
        """A focused sweep: its first pass chooses the kernels ncu profiles
        (:func:`~torch_nsight.collect.parent.focus.focused`)."""
        if self.focus is None:
            return self
        from torch_nsight.collect.parent.focus import focused

        return focused(self)

    def progress(self) -> Progress:
        return Progress("shape", len(self.job.shapes) * len(self.job.variants),
                        quiet=self.quiet, profiling=self.ncu is not None)

    def children(self, private: Path | None) -> list[ChildSpec]:
        from torch_nsight.collect.parent import sweep_kind

        assert private is not None
        return sweep_kind.child_specs(self, private)

    def yielded(self, outcome: ChildOutcome) -> list[dict[str, Any]]:
        return child_items(outcome)

    def check(self, outcome: ChildOutcome, items: list[dict[str, Any]]) -> str | None:
        return check_report(outcome, items, dry_run=self.ncu is None)

    def judge(self, items: list[dict[str, Any]], children: list[dict[str, Any]],
              errors: list[tuple[str, TorchNsightError]]
              ) -> tuple[list[dict[str, Any]], TorchNsightError | None]:
        return judge(items, children, errors, dry_run=self.ncu is None)

    def describe(self, settled: Settled, stamps: Stamps, timing: dict[str, Any]) -> Manifest:
        from torch_nsight.collect.parent import sweep_kind

        return sweep_kind.manifest(self, settled, timing)

    def load(self, manifest: Manifest) -> Any:
        from torch_nsight.collect.parent import sweep_kind

        return sweep_kind.load(self)

    def finish(self, loaded: Any, manifest: Manifest) -> Any:
        from torch_nsight.collect.parent import sweep_kind

        return sweep_kind.finish(self, loaded, manifest)

    def interrupted(self, outcomes: list[ChildOutcome]) -> None:
        if not self.keep:
            return
        finished = sum(1 for o in outcomes for i in (o.results or {}).get("items", [])
                       if i.get("status") == "ok")
        logger.warning("interrupted: %d finished shape(s) kept in %s (torch_nsight.load reads "
                       "it)", finished, self.work)


def plan_sweep(model: Any, shapes: Any, *, runs: int = 1,
               extra_options: Mapping[str, Any] | None = None, **options: Any) -> SweepPlan:
    """:func:`plan_from` with the options as keywords."""
    return plan_from(model, shapes, SweepOptions(runs=runs, extra=extra_options, **options))


def plan_from(model: Any, shapes: Any, options: SweepOptions) -> SweepPlan:
    """Check the options of :func:`torch_nsight.sweep` and resolve them into a plan
    (:class:`~torch_nsight.collect.parent.options.SweepOptions` documents each); the output
    directory is created.

    Raises:
        TypeError, ValueError: an option is invalid (its name is in the message).
        NcuNotFoundError, NcuVersionError: ``ncu`` missing or too old.
    """
    entered = time.time()
    o = options
    variants = check_variants(model)
    pairs = jobs.normalize_shapes(shapes)
    make_inputs = check_make_inputs(o.make_inputs)
    _check_options(make_inputs=make_inputs, pairs=pairs, warmup=o.warmup, runs=o.runs,
                   timeout=o.timeout, devices=o.devices, profiler=o.profiler, derive=o.derive,
                   ops=o.ops, flags={"backward": o.backward, "replicate": o.replicate,
                                     "quiet": o.quiet, "record_calls": o.record_calls})
    focus = o.focus if o.profiler == "ncu" else None
    if focus is not None:
        check_focus(focus, o.ncu_args)
    metric_set = o.metric_set
    if metric_set is None:
        metric_set = DEFAULT_METRIC_SET if o.record_calls else DEFAULT_METRIC_SET_WITHOUT_CALLS
    elif metric_set == "fast" and not o.record_calls:
        logger.warning("metric_set='fast' counts FLOPs from the calls table, which "
                       "record_calls=False turns off: kernels get times and DRAM bytes but no "
                       "roofline placement; use metric_set='lean' for FLOP counters")
    chosen = ncu_cli.resolve_metric_set(metric_set)
    extra = ncu_cli.check_extra_args(o.ncu_args)
    ops = o.ops if isinstance(o.ops, (bool, str)) else sorted(o.ops)
    job = jobs.Job(variants=variants, shapes=pairs, make_inputs=make_inputs,
                   backward=o.backward, dtype=jobs.normalize_dtype(o.dtype), warmup=o.warmup,
                   runs=o.runs, ops=ops, replicate=o.replicate, settings=user_settings(),
                   record_calls=o.record_calls)
    visible: list[str | None] = ([_visible_device(d) for d in o.devices]
                                 if o.devices is not None else [None])
    ncu_path = metrics = None
    if o.profiler == "ncu":
        ncu_path = ncu_cli.find_ncu(o.ncu)
        ncu_cli.ncu_version(ncu_path)
        metrics = ncu_cli.filter_metrics(chosen.metrics,
                                         ncu_cli.known_metric_bases(ncu_path, visible[0]))
    _warn_about_model(variants)
    keep = o.output_dir is not None
    work = (Path(o.output_dir).resolve() if o.output_dir is not None
            else Path(tempfile.mkdtemp(prefix="torch_nsight-sweep-")))
    work.mkdir(parents=True, exist_ok=True)
    (work / formats.SWEEP_MANIFEST).unlink(missing_ok=True)
    recorded = {"backward": o.backward, "dtype": job.dtype, "warmup": o.warmup,
                "runs": o.runs, "metric_set": chosen.name, "replicate": o.replicate,
                "ops": job.ops, "timeout_s": o.timeout, "devices": visible,
                "profiler": o.profiler, "ncu": ncu_path, "ncu_args": extra,
                "record_calls": o.record_calls,
                "metrics_dropped": sorted(set(chosen.metrics) - set(metrics or chosen.metrics)),
                **(o.extra or {})}
    return SweepPlan(job=job, metric_set=chosen, metrics=metrics, ncu=ncu_path,
                     ncu_args=extra, devices=o.devices, visible=visible,
                     timeout=float(o.timeout), quiet=o.quiet, executor=o.executor,
                     derive=o.derive, work=work, keep=keep, options=recorded,
                     entered=entered, focus=focus)


def check_focus(focus: Any, ncu_args: Sequence[str]) -> None:
    """``focus`` is a share of GPU time, and ``ncu_args`` leave the kernels to it.

    Raises:
        ValueError: either is not so.
    """
    if not isinstance(focus, (int, float)) or isinstance(focus, bool) or not 0 < focus <= 1:
        raise ValueError(f"focus must be a share of GPU time in (0, 1], e.g. 0.9; got {focus!r}")
    if any(a in ("-k", "--kernel-name") or a.startswith(("-k=", "--kernel-name="))
           for a in ncu_args):
        raise ValueError("focus chooses the kernels itself (ncu -k): leave -k out of ncu_args")


def _check_options(*, make_inputs: Any, pairs: list[tuple[str, Any]], warmup: Any,
                   runs: Any, timeout: Any, devices: Any, profiler: Any, derive: Any,
                   ops: Any, flags: dict[str, Any]) -> None:
    for name, value in flags.items():
        if not isinstance(value, bool):
            raise TypeError(f"{name} must be True or False, got {value!r}")
    if make_inputs is None:
        for label, shape in pairs:
            ok = isinstance(shape, int) or (isinstance(shape, Sequence) and not isinstance(
                shape, str) and all(isinstance(d, int) for d in shape))
            if not ok:
                raise ValueError(f"shape {label!r} ({shape!r}) is not a tuple of ints: pass "
                                 "make_inputs=fn(shape) to build the inputs")
    for name, value, low in (("warmup", warmup, 0), ("runs", runs, 1)):
        if not isinstance(value, int) or isinstance(value, bool) or value < low:
            raise ValueError(f"{name} must be an int >= {low}, got {value!r}")
    if not isinstance(timeout, (int, float)) or isinstance(timeout, bool) or timeout <= 0:
        raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
    if devices is not None and (isinstance(devices, (str, int)) or not devices
                                or not all(isinstance(d, (int, str)) for d in devices)):
        raise ValueError(f"devices must be None or a non-empty list of GPU indices, got "
                         f"{devices!r}")
    if profiler not in ("ncu", None):
        raise ValueError(f"profiler must be 'ncu' or None (dry run), got {profiler!r}")
    if derive is not None and (not isinstance(derive, Mapping) or not all(
            isinstance(k, str) and callable(f) for k, f in derive.items())):
        raise TypeError("derive must map column names to functions fn(row, shape)")
    if not isinstance(ops, (bool, str)) and not (
            isinstance(ops, Iterable) and all(isinstance(o, str) for o in ops)):
        raise TypeError(f"ops must be True, False, an op name or a list of op names, got "
                        f"{type(ops).__name__}")


def _warn_about_model(variants: dict[str, Any]) -> None:
    for label, value in variants.items():
        if not is_module(value):
            continue
        params = list(value.parameters())
        size = sum(p.numel() * p.element_size() for p in params)
        where = f"model[{label!r}]" if label else "model"
        if size > LARGE_MODEL_BYTES:
            logger.warning("%s holds %.1f GiB of parameters, all of which are pickled for the "
                           "child: pass a factory that builds it instead", where, size / 2**30)
        if any(p.is_cuda for p in params):
            logger.warning("%s is on the GPU: the child loads its own copy there, so it is "
                           "held twice; pass a factory or a CPU model", where)


def _visible_device(device: int | str) -> str:
    parent = os.environ.get("CUDA_VISIBLE_DEVICES")
    if isinstance(device, int) and parent:
        listed = [d.strip() for d in parent.split(",") if d.strip()]
        if not 0 <= device < len(listed):
            raise ValueError(f"devices: {device} is not one of the {len(listed)} GPU(s) in "
                             f"CUDA_VISIBLE_DEVICES={parent}")
        return listed[device]
    return str(device)


__all__ = ["SweepPlan", "check_focus", "child_env", "plan_from", "plan_sweep"]
