"""The focused second pass of ``torch-nsight profile --stalls``, merged onto the first.

The second pass runs the same command again under ncu, on the same steps, with only the
kernels whose names carry most of the latency-bound time (``-k``) and the warp-state
metrics (:data:`torch_nsight.metrics.STALL_PASS`); its report lies in
:data:`~torch_nsight.formats.STALL_FOLDER` beside the first. Reading the first report
(:class:`~torch_nsight.report.ncu_source.NcuReport`) copies the second's warp-state
columns onto its rows. The second pass profiles one launch per launch configuration
(``--filter-mode per-launch-config -c 1``): its values go to every launch of the first with
the same function name, grid, block and dynamic shared memory, in every step. (A second
pass that profiled every launch matches each by the same step, the ``sweep;...;run=N``
range around it, and its position among that name's launches in that step.) Rows without a match keep NaN; a
value the first pass measured itself is kept.

Table (first pass, second pass -> merged)::

    run  kernel_full     achieved_occupancy_pct      run  kernel_full  achieved_occupancy_pct
    12   reduce_kernel   NaN                    +    12   reduce_kernel  27.7
    12   gemm            NaN                                               -> 27.7, NaN
"""

from __future__ import annotations

import logging
from pathlib import Path

import pandas as pd

from torch_nsight import naming
from torch_nsight.formats import stall_report_of
from torch_nsight.metrics import METRICS
from torch_nsight.report.names import function_name

logger = logging.getLogger(__name__)

#: The columns the second pass brings.
STALL_COLUMNS = tuple(m.column for m in METRICS if m.kind in ("scheduler", "warp_state"))
_SUFFIXES = (".ncu-rep", ".ncu-rep.xz")


def find_stall_report(report: Path) -> Path | None:
    """The second pass's report beside ``report`` (compressed or not), or None."""
    candidate = stall_report_of(report)
    stem = candidate.name
    for suffix in sorted(_SUFFIXES, key=len, reverse=True):
        if stem.endswith(suffix):
            stem = stem[: -len(suffix)]
            break
    for suffix in _SUFFIXES:
        path = candidate.with_name(stem + suffix)
        if path.is_file():
            return path
    return None


def _step_label(start_end: object) -> str:
    """The step (measure label) a kernel ran in: its ``sweep;...`` start/end range, or ""."""
    if isinstance(start_end, (tuple, list)):
        for message in start_end:
            if isinstance(message, str) and naming.parse_measure_range(message) is not None:
                return message
    return ""


def launch_keys(frame: pd.DataFrame) -> pd.MultiIndex:
    """Per row of ``frame``: (step label, demangled name, its position among that name's
    launches in that step, in report order)."""
    ordered = frame.sort_values(["range_index", "kernel_index"], kind="stable")
    steps = ordered["range_start_end"].map(_step_label)
    names = ordered["kernel_full"].map(lambda n: n if isinstance(n, str) else "")
    keys = pd.DataFrame({"step": steps, "kernel_full": names,
                         "launch": names.groupby([steps, names], sort=False).cumcount()})
    return pd.MultiIndex.from_frame(keys.reindex(frame.index))


#: A second pass whose launches repeat a configuration at most this often was recorded one
#: launch per configuration (two compiled graphs' kernels may share a name and a shape); one
#: that profiled every launch repeats most of them.
MOSTLY_ONCE = 0.1
#: What makes two launches of one kernel the same launch configuration for ncu's
#: ``--filter-mode per-launch-config``.
_CONFIG = ("grid", "block", "shared_dynamic_bytes")


def config_keys(frame: pd.DataFrame) -> pd.MultiIndex:
    """Per row of ``frame``: (function name, grid, block, dynamic shared memory), as text:
    ncu profiles a configuration once, in the first chosen step it runs in (its launch
    configuration goes by the function name: template arguments do not part two)."""
    keys = pd.DataFrame({"function": frame["kernel_full"].map(
        lambda n: function_name(n) if isinstance(n, str) else "")})
    for column in _CONFIG:
        keys[column] = (frame[column].map(str) if column in frame
                        else pd.Series("", index=frame.index))
    return pd.MultiIndex.from_frame(keys)


def merge_stall_pass(first: pd.DataFrame, second: pd.DataFrame) -> pd.DataFrame:
    """The first pass's raw table with the second pass's warp-state columns where it had none.

    A second pass that profiled one launch per launch configuration (``--filter-mode
    per-launch-config -c 1``) gives its values to every launch of that configuration, in
    every step; one that profiled every launch gives each
    launch its own, matched by position.

    Args:
        first: the first pass's raw kernel table (carried messages already taken out).
        second: the second pass's raw kernel table, the same way.

    Returns:
        A copy of ``first``; rows of the second pass that match no row of the first are
        dropped, rows of the first that none matches keep their values (NaN).
    """
    out = first.copy()
    columns = [c for c in STALL_COLUMNS if c in second and second[c].notna().any()]
    if out.empty or second.empty or not columns:
        return out
    per_config = config_keys(second).duplicated().mean() <= MOSTLY_ONCE
    keys = config_keys if per_config else launch_keys
    found = second[columns].set_axis(keys(second))
    found = found[~found.index.duplicated()]
    matched = found.reindex(keys(out))
    for column in columns:
        values = pd.Series(matched[column].to_numpy(), index=out.index, dtype="float64")
        out[column] = out[column].astype("float64").fillna(values) if column in out else values
    hits = int(matched[columns].notna().any(axis=1).sum())
    logger.info("the second pass (%d kernels%s) gave warp states to %d of the %d kernels of "
                "the first", len(second), ", one per launch configuration" if per_config
                else "", hits, len(out))
    return out
