"""Measured gains: time a finding's fix in isolation, on this process's GPU.

For the findings whose fix can be rebuilt from the calls table (the op, its input shapes and
dtypes), :func:`benchmark_findings` times the slow form and the fixed form with CUDA events
(median of ``samples`` after warm-ups), on fresh random tensors, never on the user's model:

* ``gemm_misaligned``: the GEMM as recorded, then with the misaligned dimensions padded to a
  multiple of 64;
* ``fp32_no_tensor_cores``: the fp32 GEMM with TF32 off, then on (the setting is restored);
* the ``channels_last`` switch (``layout_conversion``, ``nchw_kernels`` and every other
  finding it fixes): the step's convolutions and batch norms on NCHW tensors, then
  channels-last, forward, and backward where the step ran one
  (:mod:`~torch_nsight.collect.benchmark_layout`);

and sets ``est_gain_ns`` to (before - after) x calls per run, ``gain_basis`` to
``measured``, with ``before_ns`` and ``after_ns`` beside (each per run: a call's time x
calls per run). Other findings are left as they are (``benchmarked`` False).
"""

from __future__ import annotations

import logging
import statistics
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from torch_nsight.errors import TorchNsightError

if TYPE_CHECKING:
    import pandas as pd

    from torch_nsight.profile import Profile

logger = logging.getLogger(__name__)

PAD_TO = 64
VERIFIABLE = ("gemm_misaligned", "fp32_no_tensor_cores")


class NoGpuError(TorchNsightError):
    """Verifying findings needs a CUDA GPU and there is none."""


def _timed(fn: Callable[[], Any], samples: int) -> float:
    """Median ns of one call of ``fn`` on the GPU (CUDA events), after 3 warm-ups."""
    import torch

    for _ in range(3):
        fn()
    times = []
    for _ in range(samples):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e6)
    return float(statistics.median(times))


def _pad(value: int) -> int:
    return -(-value // PAD_TO) * PAD_TO


def _gemm(dims: tuple[int, int, int], dtype: Any) -> Callable[[], Any]:
    import torch

    m, n, k = dims
    a = torch.randn(m, k, device="cuda", dtype=dtype)
    b = torch.randn(k, n, device="cuda", dtype=dtype)
    return lambda: torch.mm(a, b)


def _gemm_pair(call: Any, samples: int, *, tf32: bool) -> tuple[float, float]:
    import torch

    from torch_nsight.analyze.findings import gemm_dims

    dims = gemm_dims(str(call["aten_op"]), call["input_shapes"])
    if dims is None:
        raise ValueError("no GEMM dimensions")
    dtype = getattr(torch, str(call["input_dtypes"][-1]))
    if not tf32:
        before = _timed(_gemm(dims, dtype), samples)
        after = _timed(_gemm(tuple(_pad(d) for d in dims), dtype), samples)  # type: ignore[arg-type]
        return before, after
    saved = torch.backends.cuda.matmul.allow_tf32
    try:
        torch.backends.cuda.matmul.allow_tf32 = False
        before = _timed(_gemm(dims, dtype), samples)
        torch.backends.cuda.matmul.allow_tf32 = True
        after = _timed(_gemm(dims, dtype), samples)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = saved
    return before, after


def _calls_for(calls: pd.DataFrame, finding: Any, ops: tuple[str, ...]) -> pd.DataFrame:
    from torch_nsight.collect.benchmark_layout import matching

    mine = calls[calls["module_path"].eq(finding["module_path"])
                 & matching(calls["variant"], finding["variant"])
                 & matching(calls["shape"], finding["shape"])]
    return mine[mine["aten_op"].map(lambda op: any(o in str(op) for o in ops))]


def benchmark_findings(profile: Profile, *, top: int = 5, samples: int = 20) -> pd.DataFrame:
    """Time the fix of the top findings that can be benchmarked on this GPU.

    Args:
        profile: a profile with a calls table (a sweep's, or ``record_calls=``).
        top: how many of the ranked findings to try.
        samples: timed calls per form.

    Returns:
        :meth:`Profile.findings` with ``benchmarked``, ``before_ns`` and ``after_ns`` added and
        the benchmarked rows' ``est_gain_ns``/``gain_basis`` replaced by the measurement.

    Raises:
        NoGpuError: no CUDA GPU is visible.
    """
    import torch

    if not torch.cuda.is_available():
        raise NoGpuError("benchmarking findings times their fixes on a CUDA GPU, and none is "
                         "visible: run it on the GPU machine, or drop --benchmark")
    found = profile.finding_table(fold=False).copy()  # each block's own module, to rebuild its call
    found["benchmarked"] = False
    found["before_ns"] = found["after_ns"] = found["untimed_calls"] = float("nan")
    calls = profile.calls
    if calls is None or calls.empty:
        logger.warning("no calls table: nothing to rebuild the fixes from (record with "
                       "sweep(), or instrument(model, record_calls=...))")
        return found
    for index in found.index[:top]:
        finding = found.loc[index]
        kind = finding["finding"]
        if kind not in VERIFIABLE:
            continue
        mine = _calls_for(calls, finding, ("mm", "linear", "matmul"))
        if mine.empty:
            continue
        call = mine.iloc[0]
        try:
            before, after = _gemm_pair(call, samples, tf32=kind == "fp32_no_tensor_cores")
        except (ValueError, TypeError, RuntimeError) as err:
            logger.warning("could not time the fix of %s in %s: %s", kind,
                           finding["module"], err)
            continue
        count = float(mine["count"].sum()) if "count" in mine else 1.0
        found.loc[index, ["before_ns", "after_ns"]] = [before * count, after * count]  # a run
        found.loc[index, "est_gain_ns"] = (before - after) * count
        found.loc[index, "gain_basis"] = "measured"
        found.loc[index, "benchmarked"] = True
        logger.info("%s in %s: %.1f -> %.1f µs", kind, finding["module"], before / 1e3,
                    after / 1e3)
    if found.head(top)["fix_code"].eq("channels_last").any():
        from torch_nsight.collect.benchmark_layout import benchmark_channels_last

        benchmark_channels_last(found, calls, lambda run: _timed(run, samples))
    from torch_nsight.analyze.findings.run_checks import ranked

    return ranked(found).reset_index(drop=True)
