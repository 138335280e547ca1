"""The plan of a sweep: its arguments checked and resolved into one typed record.

:func:`plan_sweep` is the first phase of :func:`torch_nsight.sweep` (plan -> launch -> settle
-> load): it validates every argument (``TypeError``/``ValueError`` naming it), picks the
metric set, finds ``ncu`` and the metrics it knows, builds the job the children run and
decides where the files go. The later phases read only the :class:`SweepPlan`.
"""

from __future__ import annotations

import logging
import os
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from torch_nsight import formats
from torch_nsight.collect.shared import job as jobs
from torch_nsight.collect.shared import ncu as ncu_cli
from torch_nsight.collect.shared.arguments import (
    check_make_inputs,
    check_variants,
    is_module,
    user_settings,
)
from torch_nsight.metrics import (
    DEFAULT_METRIC_SET,
    DEFAULT_METRIC_SET_WITHOUT_CALLS,
    MetricSet,
)

logger = logging.getLogger(__name__)

LARGE_MODEL_BYTES = 2 << 30
#: The torch_nsight package folder (found without importing the package root).
_PACKAGE = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class SweepPlan:
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


def plan_sweep(model: Any, shapes: Any, *, make_inputs: Any, backward: bool, dtype: Any,
               warmup: int, repeats: int, metric_set: str | Sequence[str] | None, ops: Any,
               replicate: bool, derive: Any, output_dir: str | os.PathLike[str] | None,
               ncu: str | os.PathLike[str] | None, ncu_args: Sequence[str], timeout: float,
               devices: Sequence[int | str] | None, profiler: Literal["ncu"] | None,
               quiet: bool, record_calls: bool, executor: Any,
               extra_options: Mapping[str, Any] | None = None) -> SweepPlan:
    """Check the arguments of :func:`torch_nsight.sweep` and resolve them into a plan
    (see its docstring for each argument); the output directory is created.

    Raises:
        TypeError, ValueError: an argument is invalid (its name is in the message).
        NcuNotFoundError, NcuVersionError: ``ncu`` missing or too old.
    """
    entered = time.time()
    variants = check_variants(model)
    pairs = jobs.normalize_shapes(shapes)
    make_inputs = check_make_inputs(make_inputs)
    _check_options(make_inputs=make_inputs, pairs=pairs, warmup=warmup, repeats=repeats,
                   timeout=timeout, devices=devices, profiler=profiler, derive=derive, ops=ops,
                   flags={"backward": backward, "replicate": replicate, "quiet": quiet,
                          "record_calls": record_calls})
    if metric_set is None:
        metric_set = DEFAULT_METRIC_SET if record_calls else DEFAULT_METRIC_SET_WITHOUT_CALLS
    elif metric_set == "fast" and not record_calls:
        logger.warning("metric_set='fast' counts FLOPs from the calls table, which "
                       "record_calls=False turns off: kernels get times and DRAM bytes but no "
                       "roofline placement; use metric_set='lean' for FLOP counters")
    chosen = ncu_cli.resolve_metric_set(metric_set)
    extra = ncu_cli.check_extra_args(ncu_args)
    job = jobs.Job(variants=variants, shapes=pairs, make_inputs=make_inputs,
                   backward=backward, dtype=jobs.normalize_dtype(dtype), warmup=warmup,
                   repeats=repeats, ops=ops if isinstance(ops, (bool, str)) else sorted(ops),
                   replicate=replicate, settings=user_settings(), record_calls=record_calls)
    visible: list[str | None] = ([_visible_device(d) for d in devices] if devices is not None
                                 else [None])
    ncu_path = metrics = None
    if profiler == "ncu":
        ncu_path = ncu_cli.find_ncu(ncu)
        ncu_cli.ncu_version(ncu_path)
        metrics = ncu_cli.filter_metrics(chosen.metrics,
                                         ncu_cli.known_metric_bases(ncu_path, visible[0]))
    _warn_about_model(variants)
    keep = output_dir is not None
    work = (Path(output_dir).resolve() if output_dir is not None
            else Path(tempfile.mkdtemp(prefix="torch_nsight-sweep-")))
    work.mkdir(parents=True, exist_ok=True)
    (work / formats.SWEEP_MANIFEST).unlink(missing_ok=True)
    options = {"backward": backward, "dtype": job.dtype, "warmup": warmup,
               "repeats": repeats, "metric_set": chosen.name, "replicate": replicate,
               "ops": job.ops, "timeout_s": timeout, "devices": visible,
               "profiler": profiler, "ncu": ncu_path, "ncu_args": extra,
               "record_calls": record_calls,
               "metrics_dropped": sorted(set(chosen.metrics) - set(metrics or chosen.metrics)),
               **(extra_options or {})}
    return SweepPlan(job=job, metric_set=chosen, metrics=metrics, ncu=ncu_path,
                     ncu_args=extra, devices=devices, visible=visible, timeout=float(timeout),
                     quiet=quiet, executor=executor, derive=derive, work=work, keep=keep,
                     options=options, entered=entered)


def _check_options(*, make_inputs: Any, pairs: list[tuple[str, Any]], warmup: Any,
                   repeats: Any, timeout: Any, devices: Any, profiler: Any, derive: Any,
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
    for name, value, low in (("warmup", warmup, 0), ("runs", repeats, 1)):
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


def child_env(visible_devices: str | None) -> dict[str, str]:
    """The child's environment: ours, with torch_nsight importable and the GPU chosen."""
    env = dict(os.environ)
    root = str(_PACKAGE.parent)
    env["PYTHONPATH"] = os.pathsep.join([root, *filter(None, [env.get("PYTHONPATH")])])
    env["PYTHONUNBUFFERED"] = "1"
    if visible_devices is not None:
        env["CUDA_VISIBLE_DEVICES"] = visible_devices
    return env
