"""The first look: a few iterations per shape under PyTorch's profiler, in this process.

No ``ncu``, no replay: Kineto/CUPTI records every kernel, copy and memset with its timing and
the CUDA call that launched it, and :class:`~torch_nsight.capture.ranges.emitter.RecordFunctionEmitter`
puts the module ranges of :func:`~torch_nsight.instrument` into the same trace, so kernels
are attributed to modules as in an Nsight Compute report (see
:mod:`torch_nsight.report.trace`). Per (variant, shape), in order:

1. ``warmup`` iterations, then ``runs`` timed iterations without any range (``bare_ns``,
   the median wall time of one iteration, synchronised);
2. the same with the module ranges on (``ranged_ns``): their cost shows as the distortion;
3. ``runs`` iterations under the profiler, each inside a labelled range and followed by a
   synchronisation, so each step's window ends with its last GPU activity.

The output directory holds one Chrome trace per (variant, shape) (open it in Perfetto or
``chrome://tracing``) and the manifest ``timeline.json``; the result is
``torch_nsight.load(output_dir)``.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from torch_nsight import formats
from torch_nsight.collect.shared.arguments import (
    check_make_inputs,
    check_variants,
    every_shape_failed,
    user_settings,
)
from torch_nsight.collect.shared.job import Job, normalize_dtype, normalize_shapes
from torch_nsight.files import gzip_file, locked_folder
from torch_nsight.naming import format_measure_range

if TYPE_CHECKING:
    from torch_nsight.profile import Profile

logger = logging.getLogger(__name__)


def _check_counts(warmup: Any, runs: Any) -> None:
    for name, value, low in (("warmup", warmup, 0), ("runs", runs, 1)):
        if not isinstance(value, int) or isinstance(value, bool) or value < low:
            raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")


def _timed(run: Callable[[], Any], count: int, sync: Callable[[], None]) -> float:
    """Median wall time (ns) of one call of ``run``, each call synchronised."""
    times = []
    for _ in range(count):
        sync()
        start = time.perf_counter_ns()
        run()
        sync()
        times.append(time.perf_counter_ns() - start)
    return float(statistics.median(times))


def timeline(model: Any, shapes: Sequence[Any] | Mapping[str, Any], *,
             make_inputs: Callable[[Any], Any] | str | None = None, backward: bool = False,
             dtype: Any = None, warmup: int = 3, runs: int = 5,
             ops: bool | str | Sequence[str] = False,
             output_dir: str | os.PathLike[str] | None = None,
             quiet: bool = False) -> Profile:
    """Record a cheap timeline of a model across shapes with PyTorch's profiler.

    Runs in this process, on the current CUDA device (on the CPU when there is none: the
    trace then holds CPU ops only and the profile no GPU rows). Kernels are attributed to
    modules (forward and ``bwd:`` backward, ops when asked) like Nsight Compute rows; the
    profile's ``timeline`` table holds each step's window and idle gaps, which
    :func:`torch_nsight.analyze.timeline_summary` turns into a verdict per shape.

    Args:
        model: an ``nn.Module``, a zero-argument factory returning one, the factory's name
            (``"package.module:make"``, ``"path/to/model.py:make"``), or a dict label -> any
            of these (``variant`` column).
        shapes: input shapes or configs, or a dict label -> shape (as for
            :func:`torch_nsight.sweep`).
        make_inputs: ``fn(shape)`` -> a tensor, tuple/list or dict of inputs, or its name;
            default ``torch.randn(shape)`` in the model's dtype.
        backward: forward and backward of ``sum(mean(output.float()))``; else forward under
            ``torch.no_grad()``.
        dtype: cast the model (and default inputs) to this dtype; None keeps the model's.
        warmup: iterations before each timed or profiled series.
        runs: measured iterations per shape (as in :func:`torch_nsight.sweep`): timed, then
            profiled, each profiled one a ``run`` (0..runs-1), a step of ``Profile.timeline``.
        ops: name functional ops too (see :func:`torch_nsight.instrument`).
        output_dir: keep the traces and manifest here (existing files replaced); None: a
            temporary directory removed once the profile is loaded.
        quiet: no progress bar.

    Returns:
        The profile (``Profile.timeline`` set). A shape that failed (out of memory, a
        model error) is recorded in the manifest and in ``Profile.failures``; the others
        are kept.

    Raises:
        ValueError, TypeError: a bad argument (shapes, counts, model).
        ShapeFailedError: every shape failed (the first errors are in the message).
    """
    job = _job(model, shapes, make_inputs=make_inputs, backward=backward, dtype=dtype,
               warmup=warmup, runs=runs, ops=ops)
    from torch_nsight.loading import load

    work = Path(output_dir) if output_dir is not None else Path(
        tempfile.mkdtemp(prefix="torch_nsight-timeline-"))
    try:
        with locked_folder(work):  # one writer at a time
            items, device = _record_all(job, work, quiet=quiet)
            formats.write_json(work / formats.TIMELINE_MANIFEST, {
                "kind": formats.TIMELINE_KIND, "format": formats.TIMELINE_FORMAT,
                "device": device, "backward": job.backward, "dtype": job.dtype,
                "items": items, "settings": user_settings()})
            if not any(item.get("status") == "ok" for item in items):
                raise every_shape_failed(items)
            profile = load(work, cache=False)
    finally:
        if output_dir is None:
            shutil.rmtree(work, ignore_errors=True)
    if output_dir is None:  # the folder went: the record says so, as a sweep's does
        records = tuple(dataclasses.replace(r, output_dir=None) for r in profile.meta.sweeps)
        profile = dataclasses.replace(profile,
                                      meta=dataclasses.replace(profile.meta, sweeps=records))
    return profile


def _job(model: Any, shapes: Any, *, make_inputs: Any, backward: bool, dtype: Any,
         warmup: Any, runs: Any, ops: Any) -> Job:
    """The arguments of :func:`timeline`, checked, as one job.

    Raises:
        ValueError, TypeError: a bad argument (shapes, counts, model).
    """
    variants = check_variants(model)
    pairs = normalize_shapes(shapes)
    make_inputs = check_make_inputs(make_inputs)
    _check_counts(warmup, runs)
    return Job(variants=variants, shapes=pairs, make_inputs=make_inputs, backward=backward,
               dtype=normalize_dtype(dtype), warmup=warmup, runs=runs, ops=ops)


def _record_all(job: Job, work: Path, *, quiet: bool) -> tuple[list[dict[str, Any]], str]:
    """Record every (variant, shape) of the job into ``work``, one trace each, a failure
    costing only its own item: the manifest's items, and the device's name."""
    import torch
    from tqdm.auto import tqdm

    from torch_nsight.capture.compiled.inductor import tracking_compiles
    from torch_nsight.collect.child.iteration import build_inputs, model_dtype, run_step

    device = torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() \
        else torch.device("cpu")
    items = []
    todo = [(v, label, shape) for v in job.variants for label, shape in job.shapes]
    for index, (variant, label, shape) in enumerate(
            tqdm(todo, desc="torch_nsight timeline", unit="shape",
                 disable=True if quiet else None, leave=False)):
        item: dict[str, Any] = {"variant": variant, "shape": label, "steps": job.runs,
                                "warmup": job.warmup}
        try:
            module = job.variants[variant]
            module = module if isinstance(module, torch.nn.Module) else module()
            if not isinstance(module, torch.nn.Module):  # as the sweep's worker says it
                raise TypeError(f"the factory returned {type(module).__name__}, not an "
                                "nn.Module")
            if job.dtype is not None:
                module = module.to(getattr(torch, job.dtype))
            module = module.to(device)
            args, kwargs = build_inputs(job, shape, device, model_dtype(module))
            with tracking_compiles():  # a compiled model compiles in the bare warm-up
                item.update(_record(module, args, kwargs, job, variant, label, device,
                                    work / formats.timeline_trace(index), run_step))
        except Exception as err:  # noqa: BLE001 - one shape's failure is recorded
            logger.warning("timeline of %s%s failed: %s: %s", label,
                           f" ({variant})" if variant else "", type(err).__name__, err)
            item.update(status="failed", error=f"{type(err).__name__}: {err}")
        items.append(item)
        if device.type == "cuda":
            torch.cuda.empty_cache()
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    return items, name


def _record(module: Any, args: tuple[Any, ...], kwargs: dict[str, Any], job: Job,
            variant: str, label: str, device: Any, trace: Path,
            run_step: Callable[..., Any]) -> dict[str, Any]:
    """Time one (variant, shape) bare and ranged, then profile it; return its manifest item."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    from torch_nsight.capture.compiled.inductor import measured_window
    from torch_nsight.capture.front.instrument import instrument
    from torch_nsight.capture.ranges.emitter import RecordFunctionEmitter

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    emitter = RecordFunctionEmitter()

    def once() -> None:
        run_step(module, args, kwargs, job.backward, emitter)

    for _ in range(job.warmup):
        once()
    bare = _timed(once, job.runs, sync)
    with instrument(module, ops=job.ops, enabled=True, emitter=emitter):
        for _ in range(job.warmup):
            once()
        ranged = _timed(once, job.runs, sync)
        activities = [ProfilerActivity.CPU]
        if device.type == "cuda":
            activities.append(ProfilerActivity.CUDA)
        # the window: graph maps carried before the profiler started are carried again
        with measured_window(), profile(activities=activities) as prof:
            once()  # the profiler's own first-iteration cost stays out of the steps
            sync()
            for run in range(job.runs):
                emitter.push(format_measure_range(variant=variant, shape=label, run=run))
                try:
                    once()
                finally:
                    emitter.pop()
                sync()
    prof.export_chrome_trace(str(trace))
    packed = gzip_file(trace)
    logger.info("%s: %.3f ms per step bare, %.3f ms with ranges", label, bare / 1e6,
                ranged / 1e6)
    return {"status": "ok", "trace": packed.name, "bare_ns": bare, "ranged_ns": ranged}
