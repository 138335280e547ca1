"""The front door of the collect stage: :func:`sweep` (public as ``torch_nsight.sweep``).

It runs in the user's process: it validates the arguments, pickles the job (with the
user's global PyTorch settings), starts one child per GPU (``ncu <flags> python -m
torch_nsight.collect.child.start <job>``, or the worker alone for a dry run) and watches
them, writes the sweep's manifest into its output directory, and returns
``torch_nsight.load(output_dir)``: every report, replicated rows, the calls table and what
happened per shape.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import shutil
import sys
import time
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from torch_nsight import formats
from torch_nsight.collect.child.start import EARLY_CUDA_ENV
from torch_nsight.collect.parent.launch import ChildSpec, Interrupted, run_children
from torch_nsight.collect.parent.outcomes import replication_groups, settle, warm_the_reader
from torch_nsight.collect.parent.plan import SweepPlan, child_env, plan_sweep
from torch_nsight.collect.parent.progress import Progress
from torch_nsight.collect.shared import job as jobs
from torch_nsight.collect.shared import timing as timings
from torch_nsight.collect.shared.arguments import check_make_inputs
from torch_nsight.errors import TorchNsightError
from torch_nsight.files import locked_folder
from torch_nsight.record import SweepRecord, now

if TYPE_CHECKING:
    import pandas as pd

    from torch_nsight.profile import Profile

logger = logging.getLogger(__name__)

STARTUP_S = 300.0
WORKER_MODULE = "torch_nsight.collect.child.start"
LARGE_MODEL_BYTES = 2 << 30
DeriveFn = Callable[["pd.Series", Any], Any]


def sweep(
    model: Any,
    shapes: Sequence[Any] | Mapping[str, Any],
    *,
    make_inputs: Callable[[Any], Any] | str | None = None,
    backward: bool = False,
    dtype: Any = None,
    warmup: int = 2,
    runs: int = 1,
    metric_set: str | Sequence[str] | None = None,
    ops: bool | str | Iterable[str] = False,
    replicate: bool = True,
    derive: Mapping[str, DeriveFn] | None = None,
    output_dir: str | os.PathLike[str] | None = None,
    ncu: str | os.PathLike[str] | None = None,
    ncu_args: Sequence[str] = (),
    timeout: float = 600.0,
    devices: Sequence[int | str] | None = None,
    profiler: Literal["ncu"] | None = "ncu",
    quiet: bool = False,
    record_calls: bool = True,
    focus: float | None = None,
    executor: Any = None,
    repeats: int | None = None,
    _options: Mapping[str, Any] | None = None,
) -> Profile:
    """Profile a model (or several variants) across input shapes under Nsight Compute.

    One ``ncu`` process runs every shape (per GPU); warm-ups run outside the profiled NVTX
    range and each measured iteration sits in start/end ranges that label its rows with
    ``variant``, ``shape`` and ``run``. The model travels to that child process by
    cloudpickle, so classes defined in ``__main__`` or a notebook work.

    Args:
        model: an ``nn.Module``, a zero-argument factory returning one (for models too big to
            pickle), the factory's name (``"package.module:make"``,
            ``"path/to/model.py:make"``: only the child imports it, so the model's library
            need not be loaded in this process, which is the quickest start), or a dict
            label -> any of these, profiled side by side (``variant`` column).
        shapes: input shapes (``[(1, 512, 1024), (4, 512, 1024)]``) or configs, or a dict
            label -> shape or config. Labels: ``1x512x1024``, ``batch:4,seq:128``...
        make_inputs: ``fn(shape)`` -> a tensor, a tuple/list (positional inputs) or a dict
            (keyword inputs), or its name as for ``model``; tensors are moved to the GPU.
            Default:
            ``torch.randn(shape)`` in the model's dtype.
        backward: profile forward and backward (of ``sum(mean(output.float()))``, seeded
            with its gradient, whose kernels have module ``(unattributed)`` and op ``loss``);
            else forward only, under ``torch.no_grad()``. The model's train/eval mode is kept.
        dtype: cast the model (and default inputs) to this dtype (``torch.bfloat16``,
            ``"bf16"``...); None keeps the model's.
        warmup: un-profiled iterations before each shape's measured ones.
        runs: measured iterations per shape, each kept as a ``run``: with more than one,
            every table gives the spread of its times (standard deviation, 95% confidence
            interval, ``stable``; see :mod:`torch_nsight.analyze.spread`) and ``compare``
            tells a change from noise. Each run is one more replay of every profiled kernel.
        metric_set: None (default): ``"fast"``: one replay pass per kernel (durations,
            DRAM bytes, clocks), FLOPs counted from the calls table's shapes
            (``flops_basis`` ``"calls"``), bound judged from the roofline; ``"lean"`` when
            ``record_calls`` is False. ``"roofline"``: FLOP counters and Nsight Compute's
            speed-of-light verdict (16 passes per kernel); ``"lean"`` (FLOP counters, no
            speed-of-light percentages: 8 passes); ``"full"`` (the analysis sections and
            ncu's rules too), ``"duration"`` (times only, one pass, no replay), or a list of
            ncu metric names. Metrics this GPU's ncu does not know are dropped (logged).
        ops: name functional ops too (see :func:`torch_nsight.instrument`).
        replicate: profile one of each group of identical sibling modules (checked in the
            child by one un-profiled iteration) and copy its rows to the others, marked in a
            ``replicated_from`` column.
        derive: column name -> ``fn(row, shape)`` added to ``Profile.kernels`` (``row`` is a
            kernel row, ``shape`` the shape as given), e.g. tokens per second.
        output_dir: keep the ``.ncu-rep`` per child, the job description (``job.json``), the
            children's results and logs, the manifest (``sweep.json``: ``torch_nsight.load``
            and ``torch-nsight report`` read the whole directory, replicated rows included)
            and the profile (``profile.parquet``). Existing files are replaced. None:
            everything lives in a temporary directory removed at the end.
        ncu: path of ``ncu``; default ``$TORCH_NSIGHT_NCU``, then ``PATH``, then
            ``/usr/local/cuda/bin/ncu``.
        ncu_args: more ``ncu`` arguments (a list). ``--clock-control none`` is always set.
        timeout: seconds per (variant, shape); a child as a whole gets that times its items
            plus 300 s. A shape past it is interrupted and recorded as failed; see
            :mod:`torch_nsight.collect.parent.launch` for what survives a stopped child.
        devices: GPU indices to spread shapes over, one ``ncu`` per GPU, run at once.
        profiler: ``"ncu"``, or None for a dry run: the same child without ``ncu`` (on the
            CPU too), to check models, inputs and shapes; its Profile has no kernel rows.
        quiet: no progress bar.
        record_calls: record the calls table (every torch-level op with its shapes, FLOPs
            and bytes, per module) in one un-profiled iteration per shape.
        executor: run the children as jobs of this executor (one per shape, all variants):
            anything with ``submit(fn, *args)`` returning an object with ``done()`` and
            ``result()`` - ``concurrent.futures.ProcessPoolExecutor``, dask's
            ``Client.get_executor()``, submitit's ``AutoExecutor`` for Slurm (see
            docs/executors.md). The output directory must be on a filesystem the workers
            share; with ``devices``, job i gets ``devices[i % len(devices)]``.
        focus: first record a timeline (:func:`torch_nsight.timeline`, in a child process),
            then profile under ``ncu`` only the kernels (by function name) that carry this
            share (0-1, e.g. 0.9) of each shape's GPU time; the other kernels keep the
            timeline's module and duration, with ``deep_profiled`` False (see
            :mod:`torch_nsight.report.focus`). None profiles every kernel.
        repeats: the former name of ``runs`` (deprecated).

    Global PyTorch settings of the calling process (TF32, cuDNN benchmark/deterministic,
    SDPA backends) are carried to the child and recorded in the profile.

    Returns:
        The :class:`~torch_nsight.Profile`: ``profile.failures`` lists shapes that failed;
        ``profile.results`` what each (variant, shape) did (status, error, elapsed,
        replication verdict); ``profile.meta.sweeps`` the options and, in ``timing``, where
        the time went (seconds per phase, see :mod:`torch_nsight.collect.shared.timing`);
        ``profile.calls`` the calls table.

    Raises:
        TypeError, ValueError: an argument is invalid (its name is in the message).
        NcuNotFoundError, NcuVersionError: ``ncu`` missing or too old.
        CounterPermissionError: ``ncu`` may not read the GPU counters.
        NothingProfiledError: ``ncu`` ran but profiled no kernel (the message says why).
        ShapeFailedError: every shape failed.
    """
    if repeats is not None:
        warnings.warn("sweep(repeats=) is now sweep(runs=)", DeprecationWarning, stacklevel=2)
        runs = repeats
    if focus is not None and profiler == "ncu":
        from torch_nsight.collect.parent.focus import focused_sweep

        make_inputs = check_make_inputs(make_inputs)  # before its timeline pass's child

        return focused_sweep(
            sweep, model, shapes, focus=focus, output_dir=output_dir, ncu_args=ncu_args,
            devices=devices, quiet=quiet,
            options=dict(make_inputs=make_inputs, backward=backward, dtype=dtype, warmup=warmup,
                         runs=runs, metric_set=metric_set, ops=ops, replicate=replicate,
                         derive=derive, ncu=ncu, timeout=timeout, profiler=profiler,
                         record_calls=record_calls, executor=executor))
    # one writer per output folder: a second sweep into it refuses instead of mixing
    with locked_folder(output_dir) if output_dir is not None else contextlib.nullcontext():
        plan = plan_sweep(model, shapes, make_inputs=make_inputs, backward=backward,
                          dtype=dtype, warmup=warmup, repeats=runs, metric_set=metric_set,
                          ops=ops, replicate=replicate, derive=derive, output_dir=output_dir,
                          ncu=ncu, ncu_args=ncu_args, timeout=timeout, devices=devices,
                          profiler=profiler, quiet=quiet, record_calls=record_calls,
                          executor=executor, extra_options=_options)
        # an executor's workers read the job files where they read and write the reports
        private = jobs.make_private_dir() if executor is None else plan.work / ".jobs"
        if executor is not None:
            shutil.rmtree(private, ignore_errors=True)  # a crashed run's job files
            private.mkdir(mode=0o700)
        try:
            specs = _child_specs(jobs.serialize_job(plan.job, private), plan, private)
            try:
                outcomes, stamps = _launch(plan, specs)
            except Interrupted as stop:
                _keep_what_finished(plan, specs, stop.outcomes)
                raise KeyboardInterrupt from None
            manifest, per_child = _settle(plan, specs, outcomes, stamps)
            return _load(plan, manifest, per_child, stamps)
        finally:
            shutil.rmtree(private, ignore_errors=True)
            if not plan.keep:
                shutil.rmtree(plan.work, ignore_errors=True)


def _launch(plan: SweepPlan, specs: list[ChildSpec]) -> tuple[list[Any], dict[str, float]]:
    """Write the job description (kept sweeps), run the children with a progress bar;
    their outcomes and the launch/settle time stamps."""
    commands = {s.name: s.command for s in specs}
    if plan.keep:
        description = {**jobs.describe_job(plan.job), "options": plan.options,
                       "commands": commands, "created": now()}
        formats.write_json(plan.work / "job.json", description)
    progress = Progress("shape", sum(s.items for s in specs), quiet=plan.quiet,
                        profiling=plan.ncu is not None)
    if plan.ncu is not None:
        warm_the_reader()
    launched = time.time()
    if plan.executor is None:
        outcomes = run_children(specs, item_timeout=plan.timeout, startup_s=STARTUP_S,
                                cwd=os.getcwd(), progress=progress)
    else:
        from torch_nsight.collect.parent.remote import run_with_executor

        outcomes = run_with_executor(specs, plan.executor, item_timeout=plan.timeout,
                                     startup_s=STARTUP_S, cwd=os.getcwd(),
                                     chose_devices=plan.devices is not None, progress=progress)
    return outcomes, {"entered": plan.entered, "launched": launched, "settled": time.time()}


def _keep_what_finished(plan: SweepPlan, specs: list[ChildSpec], outcomes: list[Any]
                        ) -> None:
    """An interrupted sweep: write the manifest of what the stopped children left, so that
    ``load(output_dir)`` reads every finished shape."""
    if not plan.keep:
        return
    stamps = {"entered": plan.entered, "launched": plan.entered, "settled": time.time()}
    with contextlib.suppress(TorchNsightError):  # nothing finished: the manifest says so
        _settle(plan, specs, outcomes, stamps)
    finished = sum(1 for o in outcomes for i in (o.results or {}).get("items", [])
                   if i.get("status") == "ok")
    logger.warning("interrupted: %d finished shape(s) kept in %s (torch_nsight.load reads "
                   "it)", finished, plan.work)


def _settle(plan: SweepPlan, specs: list[ChildSpec], outcomes: list[Any],
            stamps: dict[str, float]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Turn the children's outcomes into the manifest and write it (what failed is written
    down before a fatal error is raised); the manifest and the children's phase times.

    Raises:
        NothingProfiledError, CounterPermissionError, ShapeFailedError: as settle() decides.
    """
    items, children, problems, fatal = settle(outcomes, dry_run=plan.ncu is None)
    per_child = [{"name": o.spec.name, "ended_at": o.ended_at,
                  **timings.child_phases(o.launched_at, o.ended_at, o.results)}
                 for o in outcomes]
    calls = [{**row, "variant": item.get("variant") or None, "shape": item.get("shape")}
             for item in items for row in item.pop("calls", None) or []]
    record = SweepRecord(
        shapes=tuple(plan.shape_labels), variants=tuple(v for v in plan.job.variants if v),
        options=plan.options, items=tuple(items), problems=tuple(problems),
        commands={s.name: s.command for s in specs},
        output_dir=str(plan.work) if plan.keep else None, dry_run=plan.ncu is None,
        created=now(), timing=timings.breakdown(**stamps, finished=time.time(),
                                                children=per_child))
    # what the child ran with: the parent's settings, and whatever its factory changed
    ran = next((c["settings"] for c in children if c.get("settings")), plan.job.settings)
    manifest = {"record": record.to_dict(), "children": children,
                "replication": replication_groups(items), "calls": calls, "settings": ran}
    formats.write_manifest(plan.work, manifest)
    if fatal is not None:
        raise fatal
    return manifest, per_child


def _load(plan: SweepPlan, manifest: dict[str, Any], per_child: list[dict[str, Any]],
          stamps: dict[str, float]) -> Profile:
    """Read the sweep directory back, derive the asked columns, record the final timing."""
    profile = _load_sweep(plan.work, cache=plan.keep)
    if plan.derive:
        from torch_nsight.analyze import derive_columns

        profile = profile.with_kernels(derive_columns(profile.kernels, plan.derive,
                                                      dict(plan.job.shapes)))
    timing = timings.breakdown(**stamps, finished=time.time(), children=per_child)
    profile = _with_timing(profile, timing)
    if plan.keep:  # the manifest's record gets the final timing, loading included
        manifest["record"]["timing"] = timing
        formats.write_manifest(plan.work, manifest)
        _save(profile, plan.work)
    return profile


def _with_timing(profile: Profile, timing: dict[str, Any]) -> Profile:
    """The profile of one sweep directory with its final timing (loading included), logged
    once."""
    logger.info("sweep took %s", timings.describe(timing))
    sweeps = tuple(dataclasses.replace(s, timing=timing) for s in profile.meta.sweeps)
    return dataclasses.replace(profile, meta=dataclasses.replace(profile.meta, sweeps=sweeps))


def _load_sweep(work: Path, *, cache: bool) -> Profile:
    from torch_nsight.loading import load

    return load(work, cache=cache)


def _child_specs(payload: bytes, plan: SweepPlan, private: Path) -> list[ChildSpec]:
    """One child per device (shapes dealt round-robin), each with its own job file; with an
    executor, one child per shape (its own job), devices dealt round-robin."""
    shapes, variants, visible = plan.shape_labels, list(plan.job.variants), plan.visible
    devices, work, keep = plan.devices, plan.work, plan.keep
    per_shape = plan.executor is not None
    ncu_command = None if plan.ncu is None else plan.build_ncu_command
    specs = []
    n_shapes = len(shapes)
    slots = ([([i], visible[i % len(visible)], f"sweep-shape{i}") for i in range(n_shapes)]
             if per_shape else
             [(list(range(n_shapes))[slot::len(visible)], device,
               "sweep" if devices is None else "sweep-gpu" + "".join(
                   c if c.isalnum() else "_" for c in str(devices[slot])))
              for slot, device in enumerate(visible)])
    for indices, device, name in slots:
        if not indices:
            continue
        assignment = jobs.Assignment(indices, str(work / f"{name}.status.jsonl"),
                                     str(work / f"{name}.result.json"),
                                     jobs.parent_sys_path(), name)
        app = [sys.executable, "-m", WORKER_MODULE,
               str(jobs.write_job(payload, assignment, private))]
        report = None if ncu_command is None else work / f"{name}.ncu-rep"
        if report is not None:
            report.unlink(missing_ok=True)
        env = child_env(device)
        if ncu_command is None:  # a dry run: the CUDA context comes when (if) torch wants it
            env[EARLY_CUDA_ENV] = "0"
        specs.append(ChildSpec(
            name, app if ncu_command is None else ncu_command(work / name, app),
            env, Path(assignment.status_path), Path(assignment.result_path),
            report, work / f"{name}.log" if keep else None, len(indices) * len(variants),
            [(v or None, shapes[i]) for i in indices for v in variants]))
    return specs


def _save(profile: Profile, work: Path) -> None:
    try:
        path = profile.save(work / formats.PROFILE_FILE)
    except OSError as err:  # the Profile is still returned
        logger.warning("could not save the profile into %s: %s", work, err)
        return
    logger.info("saved %s", path)
