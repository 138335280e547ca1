"""Timeline rules: the verdict a shape's step numbers earn, and the findings that hold.

Every threshold is named here once (the reasons are in ``docs/timeline.md``). The rules read
the numbers of :mod:`~torch_nsight.analyze.steps` and return a verdict, a flag or the
numbers of a finding (its module and the time it may recover), never text:
:mod:`torch_nsight.render.timeline_words` words them.
"""

from __future__ import annotations

from typing import Any, Literal

import pandas as pd

from torch_nsight.analyze.frames import each_value
from torch_nsight.analyze.rollup import module_paths
from torch_nsight.analyze.steps import SMALL_KERNEL_NS
from torch_nsight.vocabulary import UNATTRIBUTED, in_module_range

Verdict = Literal["GPU-bound", "CPU-bound", "launch-bound", "copy-bound", "data-bound"]
#: What to try, as a code: a verdict's own, or ``gpu_bound_idle`` (see :func:`decide_advice`).
Advice = Literal[Verdict, "gpu_bound_idle"]

#: data-bound: the GPU idles, with the CPU loading data, for this share (%) of the step.
DATA_WAIT_PCT = 20.0
#: copy-bound: copies' GPU time is this share (%) of the step ...
COPY_WALL_PCT = 20.0
#: ... or this share (%) of the GPU's busy time.
COPY_BUSY_PCT = 50.0
#: launch-bound: the GPU is busy under this share (%) of the step ...
LAUNCH_BUSY_PCT = 50.0
#: ... and at least this share (%) of its kernels, by count, are small.
SMALL_KERNEL_PCT = 50.0
#: gpu_idle: the share of the idle gaps that must sit before one module for the finding
#: to name that module rather than the model.
IDLE_HERE_SHARE = 0.5
#: gpu_idle and data_wait findings: the share (%) of the step worth a look.
FINDING_PCT = 10.0
#: small_kernels finding: a module with this many launches per step (median kernel small).
MODULE_LAUNCHES = 20.0
#: distorted: module ranges lengthened the step by more than this share (%); the evidence
#: also says when the profiler lengthened it by more than this.
DISTORTION_PCT = 10.0


#: The steps timed without the profiler disagree when they spread over more than this share
#: (%) of their median (max - min): the busy share judged on them is uncertain.
UNSTABLE_BARE_PCT = 30.0


def bare_uncertain(row: pd.Series) -> bool:
    """Whether the steps timed without the profiler disagree too much to judge on."""
    spread = row.get("bare_spread_pct")
    return bool(judges_unprofiled(row) and spread == spread and spread is not None
                and spread > UNSTABLE_BARE_PCT)


def judges_unprofiled(row: pd.Series) -> bool:
    """Whether the verdict judges the step timed outside the profiler and without ranges
    (where it was timed: the profiler and the ranges lengthen the CPU side only) rather
    than the profiled step."""
    return bool(row["judged_busy_pct"] == row["judged_busy_pct"] and row["bare_wall_ns"] > 0)


def judged_busy_pct(row: pd.Series) -> float:
    """The GPU busy share (%) the verdict uses, of the step :func:`judges_unprofiled` picks."""
    return row["judged_busy_pct"] if judges_unprofiled(row) else row["busy_pct"]


def is_launch_bound(row: pd.Series) -> bool:
    return bool(judged_busy_pct(row) < LAUNCH_BUSY_PCT
                and row["small_kernel_pct"] >= SMALL_KERNEL_PCT)


def is_copy_bound(row: pd.Series) -> bool:
    return bool(row["copy_pct"] >= COPY_WALL_PCT or row["copy_busy_pct"] >= COPY_BUSY_PCT)


def is_distorted(shapes: pd.DataFrame) -> pd.Series:
    """Per shape, whether module ranges lengthened its step by over :data:`DISTORTION_PCT`."""
    return (shapes["distortion_pct"] > DISTORTION_PCT).astype(bool)


def profiler_lengthened(row: pd.Series) -> bool:
    """Whether the profiler lengthened a step, not timed without it, by over
    :data:`DISTORTION_PCT`."""
    return bool(row["profiler_pct"] > DISTORTION_PCT and not row["bare_wall_ns"] > 0)


def decide_verdict(row: pd.Series) -> Verdict:
    """The verdict of one shape's medians; rules in order data, copy, launch, CPU, GPU."""
    if row["data_wait_pct"] >= DATA_WAIT_PCT:
        return "data-bound"
    if is_copy_bound(row):
        return "copy-bound"
    if is_launch_bound(row):
        return "launch-bound"
    if judged_busy_pct(row) < LAUNCH_BUSY_PCT:
        return "CPU-bound"
    return "GPU-bound"


def decide_advice(row: pd.Series) -> Advice:
    """What to try for a shape whose ``verdict`` is decided: its verdict's own advice, but
    ``gpu_bound_idle`` for a GPU-bound step whose GPU idles at least :data:`FINDING_PCT` of
    it (it is not told the GPU alone is the limit)."""
    verdict: Verdict = row["verdict"]
    if verdict == "GPU-bound" and 100.0 - judged_busy_pct(row) >= FINDING_PCT:
        return "gpu_bound_idle"
    return verdict


def _most(frame: pd.DataFrame, column: str, weight: str) -> str | None:
    """The value of ``column`` holding the most ``weight`` (the first on ties; a missing
    weight counts 0); None when every value is missing or blank. Summed in a dict: called
    a few times per shape on small tables, where a pandas group-by costs milliseconds."""
    totals: dict[object, float] = {}
    for value, amount in zip(frame[column].tolist(), frame[weight].tolist(), strict=True):
        if value is None or pd.isna(value) or value == "":
            continue
        add = 0.0 if amount is None or pd.isna(amount) else float(amount)
        totals[value] = totals.get(value, 0.0) + add
    if not totals:
        return None
    best = max(totals.values())
    return str(next(value for value, total in totals.items() if total == best))


def label_findings(shape: pd.Series, activity: pd.DataFrame, gaps: pd.DataFrame,
                   modules: pd.DataFrame) -> list[dict[str, Any]]:
    """The findings that hold for one (variant, shape), from its medians, activities, gaps
    (:func:`~torch_nsight.analyze.steps.gaps_with_modules`) and modules.

    Returns:
        One dict per finding, in the order the rules run: ``finding``, ``module``,
        ``module_level`` (None without a module), ``est_gain_ns`` (capped at the step),
        ``pct_of_step`` (of the step timed without the profiler where it was) and the
        numbers its evidence cites (``cpu``, ``copies``, ``bytes``, ``time_ns``,
        ``idle_pct``, ``before_ns``, ``launches``, ``median_kernel_ns``, ``idle_ns``).
    """
    rows: list[dict[str, Any]] = []
    # the step the gains are shares of: timed without the profiler where it was
    step_ns = shape["bare_wall_ns"] if shape["bare_wall_ns"] > 0 else shape["wall_ns"]

    def add(finding: str, module: str | None, level: str | None, gain: float,
            **numbers: Any) -> None:
        gain = min(float(gain), float(step_ns))  # no fix saves more than the whole step
        rows.append({"finding": finding, "module": module,
                     "module_level": level if module is not None else None,
                     "est_gain_ns": gain,
                     "pct_of_step": 100.0 * gain / step_ns if step_ns > 0 else float("nan"),
                     **numbers})

    steps = shape["steps"]
    if shape["data_wait_pct"] >= FINDING_PCT:
        add("data_wait", None, None, shape["data_ns"],
            cpu=_most(gaps[gaps["data"]], "cpu", "gap_ns"))
    if is_copy_bound(shape):
        add("copy_bound", _most(activity[activity["copies"] > 0], "module", "duration_ns"),
            "innermost", shape["copy_ns"])
    pageable = activity[activity["pageable"] > 0]
    if len(pageable):
        time = pageable["duration_ns"].sum() / steps
        add("pageable_copies", _most(pageable, "module", "duration_ns"), "innermost", time,
            copies=len(pageable) / steps, bytes=pageable["copy_bytes"].sum() / steps,
            time_ns=time)
    gain = shape["gain_idle_ns"]
    # the share of the idle time the bare step keeps (none where the GPU never idled)
    scale = gain / shape["other_idle_ns"] if shape["other_idle_ns"] > 0 else float("nan")
    idle_pct = 100.0 * gain / step_ns  # of the step the verdict judges
    root = activity.assign(_root=module_paths(activity, 0))
    in_model = each_value(root["_root"], in_module_range)
    model = _most(root[in_model], "_root", "duration_ns")
    if is_launch_bound(shape):
        add("launch_bound", model, "root", gain, idle_pct=idle_pct)
    elif idle_pct >= FINDING_PCT:
        other = gaps[~gaps["data"]]
        module = _most(other, "next_module", "gap_ns")
        before = other.loc[other["next_module"] == module, "gap_ns"].sum() / steps
        # the idle belongs to the module it waits before only where most of it is there;
        # spread over the step, it is the model's
        local = before >= IDLE_HERE_SHARE * other["gap_ns"].sum() / steps
        add("gpu_idle", module if local else model, "innermost" if local else "root", gain,
            idle_pct=idle_pct, before_ns=before, next_module=module)
    busy_modules = modules[(modules["launches"] >= MODULE_LAUNCHES)
                           & (modules["median_kernel_ns"] < SMALL_KERNEL_NS)
                           & (modules["module_path"] != UNATTRIBUTED)]
    waits = gaps.loc[~gaps["data"], "gap_ns"]  # each top-level module's, summed in order
    under = waits.groupby(gaps.loc[~gaps["data"], "top"], sort=False).indices
    for _, module in busy_modules.iterrows():
        idle = waits.iloc[under.get(module["module_path"], [])].sum() / steps
        if not idle > 0:  # the GPU never waited before it: nothing for it to gain
            continue
        add("small_kernels", module["module"], "top-level",
            idle * (scale if pd.notna(scale) else 1.0), launches=module["launches"],
            median_kernel_ns=module["median_kernel_ns"], idle_ns=idle)
    return rows
