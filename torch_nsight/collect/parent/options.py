"""A sweep's options as one typed object, built once at the front door
(:func:`torch_nsight.sweep`) and read by its plan (:func:`~.plan.plan_from`): each keyword of
``sweep()`` is documented here, once."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    import pandas as pd

DeriveFn = Callable[["pd.Series", Any], Any]


@dataclass(frozen=True)
class SweepOptions:
    """The keywords of :func:`torch_nsight.sweep`, as given (the plan checks them).

    Attributes:
        make_inputs: ``fn(shape)`` -> a tensor, a tuple/list (positional inputs) or a dict
            (keyword inputs), or its name as for ``model``; tensors are moved to the GPU.
            Default: ``torch.randn(shape)`` in the model's dtype.
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
        focus: first record a timeline (:func:`torch_nsight.timeline`, in a child process),
            then profile under ``ncu`` only the kernels (by function name) that carry this
            share (0-1, e.g. 0.9) of each shape's GPU time; the other kernels keep the
            timeline's module and duration, with ``deep_profiled`` False (see
            :mod:`torch_nsight.report.focused_kernels`). None profiles every kernel.
        executor: run the children as jobs of this executor (one per shape, all variants):
            anything with ``submit(fn, *args)`` returning an object with ``done()`` and
            ``result()`` - ``concurrent.futures.ProcessPoolExecutor``, dask's
            ``Client.get_executor()``, submitit's ``AutoExecutor`` for Slurm (see
            docs/executors.md). The output directory must be on a filesystem the workers
            share; with ``devices``, job i gets ``devices[i % len(devices)]``.
        extra: more options for the manifest to record (the plan adds them as they are).
    """

    make_inputs: Callable[[Any], Any] | str | None = None
    backward: bool = False
    dtype: Any = None
    warmup: int = 2
    runs: int = 1
    metric_set: str | Sequence[str] | None = None
    ops: bool | str | Iterable[str] = False
    replicate: bool = True
    derive: Mapping[str, DeriveFn] | None = None
    output_dir: str | os.PathLike[str] | None = None
    ncu: str | os.PathLike[str] | None = None
    ncu_args: Sequence[str] = ()
    timeout: float = 600.0
    devices: Sequence[int | str] | None = None
    profiler: Literal["ncu"] | None = "ncu"
    quiet: bool = False
    record_calls: bool = True
    focus: float | None = None
    executor: Any = None
    extra: Mapping[str, Any] | None = None
