"""The front door of the collect stage: :func:`sweep` (public as ``torch_nsight.sweep``).

It runs in the user's process: it validates the arguments, pickles the job (with the
user's global PyTorch settings), starts one child per GPU (``ncu <flags> python -m
torch_nsight.collect.child.worker <job>``, or the worker alone for a dry run) and watches
them, writes the sweep's manifest into its output directory, and returns
``torch_nsight.load(output_dir)``: every report, replicated rows, the calls table and what
happened per shape.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from torch_nsight import formats
from torch_nsight.collect.parent.launch import ChildSpec, run_children
from torch_nsight.collect.parent.outcomes import replication_groups, settle
from torch_nsight.collect.parent.progress import SweepProgress
from torch_nsight.collect.shared import job as jobs
from torch_nsight.collect.shared import ncu as ncu_cli
from torch_nsight.collect.shared import timing as timings
from torch_nsight.metrics import DEFAULT_METRIC_SET, DEFAULT_METRIC_SET_WITHOUT_CALLS
from torch_nsight.naming import format_measure_range
from torch_nsight.record import SweepRecord, now

if TYPE_CHECKING:
    import pandas as pd

    from torch_nsight.profile import Profile

logger = logging.getLogger(__name__)

STARTUP_S = 300.0
WORKER_MODULE = "torch_nsight.collect.child.worker"
LARGE_MODEL_BYTES = 2 << 30
DeriveFn = Callable[["pd.Series", Any], Any]


def _variants(model: Any) -> dict[str, Any]:
    from torch import nn

    def check(label: str, value: Any) -> Any:
        if not isinstance(value, nn.Module) and not callable(value):
            raise TypeError(f"model{label and f'[{label!r}]'} must be an nn.Module or a "
                            f"zero-argument factory, got {type(value).__name__}")
        return value

    if isinstance(model, Mapping):
        if not model:
            raise ValueError("model is an empty dict: give at least one variant")
        out = {}
        for label, value in model.items():
            if not isinstance(label, str) or not label:
                raise TypeError(f"variant labels must be non-empty str, got {label!r}")
            try:
                format_measure_range(variant=label)
            except ValueError as err:
                raise ValueError(f"variant label {label!r}: {err}") from err
            out[label] = check(label, value)
        return out
    return {"": check("", model)}


def _check_options(*, make_inputs: Any, pairs: list[tuple[str, Any]], warmup: Any,
                   repeats: Any, timeout: Any, devices: Any, profiler: Any, derive: Any,
                   ops: Any, flags: dict[str, Any]) -> None:
    for name, value in flags.items():
        if not isinstance(value, bool):
            raise TypeError(f"{name} must be True or False, got {value!r}")
    if make_inputs is not None and not callable(make_inputs):
        raise TypeError("make_inputs must be a function shape -> inputs, or None")
    if make_inputs is None:
        for label, shape in pairs:
            ok = isinstance(shape, int) or (isinstance(shape, Sequence) and not isinstance(
                shape, str) and all(isinstance(d, int) for d in shape))
            if not ok:
                raise ValueError(f"shape {label!r} ({shape!r}) is not a tuple of ints: pass "
                                 "make_inputs=fn(shape) to build the inputs")
    for name, value, low in (("warmup", warmup, 0), ("repeats", repeats, 1)):
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
    from torch import nn

    for label, value in variants.items():
        if not isinstance(value, nn.Module):
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
    import torch_nsight

    env = dict(os.environ)
    root = str(Path(torch_nsight.__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join([root, *filter(None, [env.get("PYTHONPATH")])])
    env["PYTHONUNBUFFERED"] = "1"
    if visible_devices is not None:
        env["CUDA_VISIBLE_DEVICES"] = visible_devices
    return env


def sweep(
    model: Any,
    shapes: Sequence[Any] | Mapping[str, Any],
    *,
    make_inputs: Callable[[Any], Any] | None = None,
    backward: bool = False,
    dtype: Any = None,
    warmup: int = 2,
    repeats: int = 1,
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
    _options: Mapping[str, Any] | None = None,
) -> Profile:
    """Profile a model (or several variants) across input shapes under Nsight Compute.

    One ``ncu`` process runs every shape (per GPU); warm-ups run outside the profiled NVTX
    range and each measured iteration sits in start/end ranges that label its rows with
    ``variant``, ``shape`` and ``run``. The model travels to that child process by
    cloudpickle, so classes defined in ``__main__`` or a notebook work.

    Args:
        model: an ``nn.Module``, a zero-argument factory returning one (for models too big to
            pickle), or a dict label -> either, profiled side by side (``variant`` column).
        shapes: input shapes (``[(1, 512, 1024), (4, 512, 1024)]``) or configs, or a dict
            label -> shape or config. Labels: ``1x512x1024``, ``batch:4,seq:128``...
        make_inputs: ``fn(shape)`` -> a tensor, a tuple/list (positional inputs) or a dict
            (keyword inputs); tensors are moved to the GPU. Default:
            ``torch.randn(shape)`` in the model's dtype.
        backward: profile forward and backward (of ``sum(mean(output.float()))``, seeded
            with its gradient, whose kernels have module ``(unattributed)`` and op ``loss``);
            else forward only, under ``torch.no_grad()``. The model's train/eval mode is kept.
        dtype: cast the model (and default inputs) to this dtype (``torch.bfloat16``,
            ``"bf16"``...); None keeps the model's.
        warmup: un-profiled iterations before each shape's measured ones.
        repeats: measured iterations per shape; each is kept as a ``run``.
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
    if focus is not None and profiler == "ncu":
        from torch_nsight.collect.parent.focus import focused_sweep

        return focused_sweep(
            sweep, model, shapes, focus=focus, output_dir=output_dir, ncu_args=ncu_args,
            devices=devices, quiet=quiet,
            options=dict(make_inputs=make_inputs, backward=backward, dtype=dtype, warmup=warmup,
                         repeats=repeats, metric_set=metric_set, ops=ops, replicate=replicate,
                         derive=derive, ncu=ncu, timeout=timeout, profiler=profiler,
                         record_calls=record_calls, executor=executor))
    entered = time.time()
    variants = _variants(model)
    pairs = jobs.normalize_shapes(shapes)
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
    settings = _user_settings()
    job = jobs.Job(variants=variants, shapes=pairs, make_inputs=make_inputs,
                   backward=backward, dtype=jobs.normalize_dtype(dtype), warmup=warmup,
                   repeats=repeats, ops=ops if isinstance(ops, (bool, str)) else sorted(ops),
                   replicate=replicate, settings=settings, record_calls=record_calls)
    visible = [_visible_device(d) for d in devices] if devices is not None else [None]
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
    # an executor's workers read the job files where they read and write the reports
    private = jobs.make_private_dir() if executor is None else work / ".jobs"
    if executor is not None:
        shutil.rmtree(private, ignore_errors=True)  # a crashed run's job files
        private.mkdir(mode=0o700)
    try:
        payload = jobs.serialize_job(job, private)
        specs = _child_specs(payload, shapes=[label for label, _ in pairs],
                             variants=list(variants),
                             devices=devices, visible=visible, work=work, private=private,
                             keep=keep, per_shape=executor is not None,
                             ncu_command=None if ncu_path is None else
                             lambda report, app: ncu_cli.build_command(
                                 ncu_path, report=report, metric_set=chosen, metrics=metrics,
                                 app=app, exclude_replicas=replicate, extra_args=extra))
        options = {"backward": backward, "dtype": job.dtype, "warmup": warmup,
                   "repeats": repeats, "metric_set": chosen.name, "replicate": replicate,
                   "ops": job.ops, "timeout_s": timeout, "devices": visible,
                   "profiler": profiler, "ncu": ncu_path, "ncu_args": extra,
                   "record_calls": record_calls,
                   "metrics_dropped": sorted(set(chosen.metrics) - set(metrics or chosen.metrics)),
                   **(_options or {})}
        commands = {s.name: s.command for s in specs}
        if keep:
            description = {**jobs.describe_job(job), "options": options, "commands": commands,
                           "created": now()}
            formats.write_json(work / "job.json", description)
        progress = SweepProgress(sum(s.items for s in specs), quiet=quiet,
                                 profiling=ncu_path is not None)
        launched = time.time()
        if executor is None:
            outcomes = run_children(specs, item_timeout=float(timeout), startup_s=STARTUP_S,
                                    cwd=os.getcwd(), progress=progress)
        else:
            from torch_nsight.collect.parent.remote import run_with_executor

            outcomes = run_with_executor(specs, executor, item_timeout=float(timeout),
                                         startup_s=STARTUP_S, cwd=os.getcwd(),
                                         chose_devices=devices is not None, progress=progress)
        settled = time.time()
        items, children, problems, fatal = settle(outcomes, dry_run=ncu_path is None)
        per_child = [{"name": o.spec.name, "ended_at": o.ended_at,
                      **timings.child_phases(o.launched_at, o.ended_at, o.results)}
                     for o in outcomes]
        calls = [{**row, "variant": item.get("variant") or None, "shape": item.get("shape")}
                 for item in items for row in item.pop("calls", None) or []]
        record = SweepRecord(
            shapes=tuple(label for label, _ in pairs), variants=tuple(v for v in variants if v),
            options=options, items=tuple(items), problems=tuple(problems), commands=commands,
            output_dir=str(work) if keep else None, dry_run=ncu_path is None, created=now(),
            timing=timings.breakdown(entered=entered, launched=launched, settled=settled,
                                     finished=time.time(), children=per_child))
        # what the child ran with: the parent's settings, and whatever its factory changed
        ran = next((c["settings"] for c in children if c.get("settings")), settings)
        manifest = {"record": record.to_dict(), "children": children,
                    "replication": replication_groups(items), "calls": calls, "settings": ran}
        formats.write_manifest(work, manifest)
        if fatal is not None:  # what failed is written down in the manifest first
            raise fatal
        profile = _load_sweep(work, cache=keep)
        if derive:
            from torch_nsight.analyze import derive_columns

            profile = profile.with_kernels(derive_columns(profile.kernels, derive, dict(pairs)))
        timing = timings.breakdown(entered=entered, launched=launched, settled=settled,
                                   finished=time.time(), children=per_child)
        profile = _with_timing(profile, timing)
        if keep:  # the manifest's record gets the final timing, loading included
            manifest["record"]["timing"] = timing
            formats.write_manifest(work, manifest)
            _save(profile, work)
    finally:
        shutil.rmtree(private, ignore_errors=True)
        if not keep:
            shutil.rmtree(work, ignore_errors=True)
    return profile


def _with_timing(profile: Profile, timing: dict[str, Any]) -> Profile:
    """The profile of one sweep directory with its final timing (loading included), logged
    once."""
    logger.info("sweep took %s", timings.describe(timing))
    sweeps = tuple(dataclasses.replace(s, timing=timing) for s in profile.meta.sweeps)
    return dataclasses.replace(profile, meta=dataclasses.replace(profile.meta, sweeps=sweeps))


def _user_settings() -> dict[str, Any]:
    """The global PyTorch settings of this process, for the child to run with."""
    from torch_nsight.capture.settings import describe_settings, read_settings

    settings = read_settings()
    return {**settings, "summary": describe_settings(settings)}


def _load_sweep(work: Path, *, cache: bool) -> Profile:
    from torch_nsight.profile import load

    return load(work, cache=cache)


def _child_specs(payload: bytes, *, shapes: list[str], variants: list[str],
                 devices: Sequence[int | str] | None, visible: list[str | None], work: Path,
                 private: Path, keep: bool, per_shape: bool = False,
                 ncu_command: Callable[[Path, list[str]], list[str]] | None) -> list[ChildSpec]:
    """One child per device (shapes dealt round-robin), each with its own job file; with
    ``per_shape`` (an executor's jobs), one child per shape, devices dealt round-robin."""
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
        specs.append(ChildSpec(
            name, app if ncu_command is None else ncu_command(work / name, app),
            child_env(device), Path(assignment.status_path), Path(assignment.result_path),
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
