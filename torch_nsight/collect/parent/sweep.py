"""The front door of the collect stage: :func:`sweep` (public as ``torch_nsight.sweep``).

It runs in the user's process: its keywords become one typed
:class:`~torch_nsight.collect.parent.options.SweepOptions`, checked and resolved into a
:class:`~torch_nsight.collect.parent.plan.SweepPlan`, which the engine
(:func:`torch_nsight.collect.parent.engine.run`) launches, settles and loads: one child
per GPU (``ncu <flags> python -m torch_nsight.collect.child.start <job>``, or the worker
alone for a dry run), the manifest in the output directory, and
``torch_nsight.load(output_dir)``: every report, replicated rows, the calls table and what
happened per shape.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

from torch_nsight.collect.parent import engine
from torch_nsight.collect.parent.options import DeriveFn, SweepOptions
from torch_nsight.collect.parent.plan import plan_from
from torch_nsight.files import locked_folder

if TYPE_CHECKING:
    from torch_nsight.profile import Profile


def sweep(model: Any, shapes: Sequence[Any] | Mapping[str, Any], *,
          make_inputs: Callable[[Any], Any] | str | None = None, backward: bool = False,
          dtype: Any = None, warmup: int = 2, runs: int = 1,
          metric_set: str | Sequence[str] | None = None,
          ops: bool | str | Iterable[str] = False, replicate: bool = True,
          derive: Mapping[str, DeriveFn] | None = None,
          output_dir: str | os.PathLike[str] | None = None,
          ncu: str | os.PathLike[str] | None = None, ncu_args: Sequence[str] = (),
          timeout: float = 600.0, devices: Sequence[int | str] | None = None,
          profiler: Literal["ncu"] | None = "ncu", quiet: bool = False,
          record_calls: bool = True, focus: float | None = None,
          executor: Any = None) -> Profile:
    """Profile a model (or several variants) across input shapes under Nsight Compute.

    One ``ncu`` process runs every shape (per GPU); warm-ups run outside the profiled NVTX
    range and each measured iteration sits in start/end ranges that label its rows with
    ``variant``, ``shape`` and ``run``. The model travels to that child process by
    cloudpickle, so classes defined in ``__main__`` or a notebook work. Global PyTorch
    settings of the calling process (TF32, cuDNN, SDPA backends) are carried to the child
    and recorded in the profile.

    Args:
        model: an ``nn.Module``, a zero-argument factory returning one (for models too big to
            pickle), the factory's name (``"package.module:make"``,
            ``"path/to/model.py:make"``: only the child imports it, so the model's library
            need not be loaded in this process, which is the quickest start), or a dict
            label -> any of these, profiled side by side (``variant`` column).
        shapes: input shapes (``[(1, 512, 1024), (4, 512, 1024)]``) or configs, or a dict
            label -> shape or config. Labels: ``1x512x1024``, ``batch:4,seq:128``...
        make_inputs, backward, dtype, warmup, runs, metric_set, ops, replicate, derive,
            output_dir, ncu, ncu_args, timeout, devices, profiler, quiet, record_calls,
            focus, executor: the options, each documented once in
            :class:`~torch_nsight.collect.parent.options.SweepOptions`: inputs, backward
            pass, dtype, iterations, the metrics, what to name and replicate, columns to
            derive, where the files go, ``ncu`` and its arguments, the per-shape timeout,
            GPUs, a dry run (``profiler=None``), the progress bar, the calls table, a
            focused sweep (``focus=0.9``) and an executor for the children.

    Returns:
        The :class:`~torch_nsight.Profile`: ``profile.failures`` lists shapes that failed;
        ``profile.results`` what each (variant, shape) did (status, error, elapsed,
        replication verdict); ``profile.meta.sweeps`` the options and, in ``timing``, where
        the time went (:mod:`torch_nsight.collect.shared.timing`); ``profile.calls`` the
        calls table.

    Raises:
        TypeError, ValueError: an argument is invalid (its name is in the message).
        NcuNotFoundError, NcuVersionError: ``ncu`` missing or too old.
        CounterPermissionError: ``ncu`` may not read the GPU counters.
        NothingProfiledError: ``ncu`` ran but profiled no kernel (the message says why).
        ShapeFailedError: every shape failed.
    """
    options = SweepOptions(
        make_inputs=make_inputs, backward=backward, dtype=dtype, warmup=warmup, runs=runs,
        metric_set=metric_set, ops=ops, replicate=replicate, derive=derive,
        output_dir=output_dir, ncu=ncu, ncu_args=ncu_args, timeout=timeout, devices=devices,
        profiler=profiler, quiet=quiet, record_calls=record_calls, focus=focus,
        executor=executor)
    # one writer per output folder: a second sweep into it refuses instead of mixing
    with locked_folder(output_dir) if output_dir is not None else contextlib.nullcontext():
        profile: Profile = engine.run(plan_from(model, shapes, options))
        return profile
