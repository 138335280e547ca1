"""``step_idle``: the time the GPU idles in the user's bare step, from ``profile --verify``.

A kernel profile cannot see it: under ncu a step runs several times slower even where no
kernel is profiled (2.4-12x, ``bench/ncu_unprofiled_steps.py``), so no step of the profiled
process says how long the user's step takes. ``--verify``'s bare runs do: their steps with
the fix off are the user's step as it runs (:func:`step_idle`). What the step takes beyond
its kernels' time is time the GPU waits for the CPU (its launches, its own work, a
synchronization), which no kernel's fix recovers.

The cause and the fix come from the step's launches, by the timeline's own rule
(:mod:`torch_nsight.analyze.verdicts`): where most of them are shorter than a launch takes
(:data:`~torch_nsight.analyze.steps.SMALL_KERNEL_NS`, :data:`SMALL_KERNEL_PCT` of them), the
launches hold the step (``launch_overhead``) and torch.compile of the model cuts them
(``compile_model``, which ``--verify`` then measures); otherwise the CPU's own work does,
which no switch fixes (``none_known``: the timeline shows where). The gain is the idle time:
what the step would lose if the GPU never waited, a bound on what cutting launches saves.

Before both: where the step ran ops whose output size depends on their input's values
(:data:`DATA_DEPENDENT_OPS`), the CPU waits for the GPU at each to learn the size, and
torch.compile breaks its graph there (Dynamo's default), so a compile does not cut that wait
(Faster R-CNN, 2026-11-29: the GPU idled 41.3 ms of a 79.0 ms step; the model's compile
measured 0.18 ms, noise). Cause ``data_dependent``, fix ``fixed_shapes`` (no switch), and
the idle time is a bound (``gain_bound_ns``), not a gain: how much of it the waits cost is
not known from a kernel profile.
Not a registered check: it needs the bare step, which only ``--verify`` times.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Any

import pandas as pd

from torch_nsight.analyze.findings.cast_first import cast_first
from torch_nsight.analyze.findings.codes import Cause, FixCode
from torch_nsight.analyze.findings.run_checks import ranked
from torch_nsight.analyze.findings.sites import root_class
from torch_nsight.analyze.frames import runs_per_group
from torch_nsight.analyze.steps import SMALL_KERNEL_NS
from torch_nsight.analyze.verdicts import FINDING_PCT, SMALL_KERNEL_PCT
from torch_nsight.vocabulary import (
    FINDING_CODE_COLUMNS,
    FINDING_RECORD_COLUMNS,
    LABELS,
    in_module_range,
    split_path,
)

__all__ = ["BARE_STEP_BASIS", "DATA_DEPENDENT_OPS", "add_step_idle", "data_dependent_ops",
           "step_idle"]

#: ``gain_basis`` of a gain read from the bare step's time against its kernels'.
BARE_STEP_BASIS = "bare_step"
#: aten (and torchvision) ops whose output's size is decided by the input's values on the
#: GPU: the CPU waits to learn it (a synchronization), and torch.compile breaks its graph at
#: each (``capture_dynamic_output_shape_ops`` off by default). ``index_mask`` is ``x[mask]``:
#: aten's ``index`` with a boolean index.
DATA_DEPENDENT_OPS = ("nonzero", "argwhere", "masked_select", "index_mask", "nms", "_unique",
                      "_unique2", "unique_dim", "unique_consecutive", "unique_dim_consecutive")


def _masked(dtypes: object) -> bool:
    """Whether an ``index`` call's input dtypes hold a boolean index (after the tensor)."""
    return isinstance(dtypes, (list, tuple)) and "bool" in [str(d) for d in dtypes[1:]]


def data_dependent_ops(kernels: pd.DataFrame, calls: pd.DataFrame | None = None) -> list[str]:
    """The :data:`DATA_DEPENDENT_OPS` the step ran, in that order: from the calls table where
    there is one (``index`` with a boolean index is ``index_mask``), else from the ops of the
    kernels' calls (``aten_ops``), which name fewer (no ``index_mask``)."""
    if calls is not None and len(calls) and "aten_op" in calls:
        ran = set(calls["aten_op"].dropna())
        index = calls[calls["aten_op"].eq("index")]
        if "input_dtypes" in index and any(_masked(d) for d in index["input_dtypes"]):
            ran.add("index_mask")
    elif "aten_ops" in kernels:
        ran = {op.strip() for ops in kernels["aten_ops"].dropna().unique()
               for op in (ops.split(",") if isinstance(ops, str) else ops)}
    else:
        return []
    return [op for op in DATA_DEPENDENT_OPS if op in ran]


def step_idle(kernels: pd.DataFrame, bare_ns: float, calls: pd.DataFrame | None = None
              ) -> dict[str, Any] | None:
    """The ``step_idle`` finding of a profiled step whose bare time is ``bare_ns``, as a row
    of :data:`~torch_nsight.vocabulary.FINDING_RECORD_COLUMNS`; None where the GPU idles
    under :data:`~torch_nsight.analyze.verdicts.FINDING_PCT` of the step, or the profile
    holds more than one (variant, shape) (which of them the bare step is, is unknown).

    Args:
        kernels: the profile's kernel table (``Profile.kernels``): ``duration_ns`` per
            launch, the runs (steps) they come from.
        bare_ns: the median step without the profiler (``--verify``'s steps with the fix
            off); the profile must hold every kernel of its steps.
        calls: the profile's calls table, for the ops of data-dependent size
            (:func:`data_dependent_ops`; without it, the kernels' ops).
    """
    if kernels.empty or not bare_ns > 0:
        return None
    labels = runs_per_group(kernels, LABELS)
    if len(labels) != 1:
        return None
    runs = float(labels["runs"].iloc[0])
    durations = kernels["duration_ns"].astype(float)
    kernel_ns = float(durations.sum()) / runs
    idle = bare_ns - kernel_ns
    if not math.isfinite(idle) or 100.0 * idle / bare_ns < FINDING_PCT:
        return None
    small_pct = 100.0 * float((durations < SMALL_KERNEL_NS).mean())
    launches = small_pct >= SMALL_KERNEL_PCT
    waits = data_dependent_ops(kernels, calls)
    cause: Cause | None = ("data_dependent" if waits
                           else "launch_overhead" if launches else None)
    fix: FixCode = ("fixed_shapes" if waits else "compile_model" if launches
                    else "none_known")
    roots = [split_path(str(p))[0] for p in kernels.get("module_path", pd.Series(dtype=object))
             if in_module_range(p)]
    root = Counter(roots).most_common(1)[0][0] if roots else None  # first seen on ties
    facts = {"bare_step_ns": bare_ns, "kernel_ns": kernel_ns, "idle_ns": idle,
             "idle_pct": 100.0 * idle / bare_ns,
             "launches_per_run": len(kernels) / runs,
             "small_kernel_pct": small_pct, "small_kernel_ns": SMALL_KERNEL_NS}
    row: dict[str, Any] = {**dict.fromkeys(FINDING_RECORD_COLUMNS),
                           **dict.fromkeys(FINDING_CODE_COLUMNS)}
    said = {c: (v if v != "" else None) for c, v in labels.iloc[0][list(LABELS)].items()}
    row.update({**said, "module": root, "module_path": root,
                "finding": "step_idle", "cause": cause, "module_class": root_class(root),
                "aten_ops": ", ".join(waits) or None,
                "fix_code": fix, "fix_params": {"ops": waits} if waits else {},
                "facts": facts, "est_gain_ns": math.nan if waits else idle,
                "gain_bound_ns": idle if waits else math.nan,
                "gain_basis": BARE_STEP_BASIS, "confidence": "medium"})
    return row


def add_step_idle(found: pd.DataFrame, row: dict[str, Any]) -> pd.DataFrame:
    """``found`` (a finding table, codes and maybe words) with ``row`` added in
    :func:`~torch_nsight.analyze.findings.run_checks.ranked` order; a column ``row`` lacks
    stays empty in it."""
    values = {c: row.get(c) for c in found.columns}
    if "blocks" in found.columns:  # a folded table: the model's one row is one block
        values["blocks"] = 1
    extra = pd.DataFrame([values], columns=found.columns, dtype=object)
    both = cast_first(pd.concat([found, extra], ignore_index=True) if len(found) else extra)
    for column in found.columns:  # the table's own types: a float column stays float
        if pd.api.types.is_numeric_dtype(found[column].dtype):
            both[column] = pd.to_numeric(both[column], errors="coerce")
    return ranked(both).reset_index(drop=True)
