"""Timeline verdicts: is each shape GPU-, launch-, copy- or data-bound?

A timeline source (a ``torch.profiler`` trace) carries two tables: ``kernels``, one row per
GPU activity (kernel, copy, memset), and ``timeline``, one ``step`` row per measured
iteration and one ``gap`` row per interval of at least 1 µs inside a step where the GPU ran
nothing. An activity belongs to the step with its ``(source, variant, shape, run)``.

Step numbers are computed per step, then reported as the median over the shape's steps;
module numbers are sums divided by the shape's number of steps. The rules, thresholds and
their reasons are in ``docs/timeline.md``.
"""

from __future__ import annotations

import logging
from typing import Literal, cast

import numpy as np
import pandas as pd

from torch_nsight.analyze.columns import check_columns, needs
from torch_nsight.analyze.frames import filled
from torch_nsight.analyze.rollup import blank_to_none
from torch_nsight.analyze.spread import spread
from torch_nsight.vocabulary import LABELS, UNATTRIBUTED, path_leaf, path_prefix

logger = logging.getLogger(__name__)

Verdict = Literal["GPU-bound", "CPU-bound", "launch-bound", "copy-bound", "data-bound"]

#: A kernel shorter than this (ns) is small: eager PyTorch takes longer to launch it.
SMALL_KERNEL_NS = 10_000.0
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
#: gpu_idle and data_wait findings: the share (%) of the step worth a look.
FINDING_PCT = 10.0
#: small_kernels finding: a module with this many launches per step (median kernel small).
MODULE_LAUNCHES = 20.0
#: distorted: module ranges lengthened the step by more than this share (%); the evidence
#: also says when the profiler lengthened it by more than this.
DISTORTION_PCT = 10.0
#: A gap is a data wait when its ``cpu`` contains one of these (case-insensitive).
DATA_LOADING_PATTERNS = ("dataloader", "__next__", "collate", "pin_memory")

SUMMARY_COLUMNS = (
    "variant", "shape", "steps", "wall_ns", "busy_pct", "idle_pct", "kernels_per_step",
    "launches_per_step", "launches_per_ms", "small_kernel_pct", "small_kernel_time_pct",
    "copies_per_step", "copy_bytes_per_step", "copy_gb_per_s", "pageable_copies_per_step",
    "copy_pct", "copy_busy_pct", "data_wait_pct", "sync_pct", "largest_gaps",
    "distortion_pct", "profiler_pct", "bare_busy_pct", "verdict", "evidence", "advice",
    "distorted", "wall_mean_ns", "wall_std_ns", "wall_ci95_ns", "stable",
)
FINDING_COLUMNS = ("variant", "shape", "module", "module_level", "finding", "evidence", "fix",
                   "est_gain_ns", "gain_basis", "pct_of_step")
MODULE_LAUNCH_COLUMNS = ("variant", "shape", "module_path", "module", "steps", "launches",
                         "kernels", "gpu_ns", "pct_of_gpu", "median_kernel_ns",
                         "small_kernel_pct")
ADVICE: dict[str, str] = {
    "data-bound": "Feed the GPU faster: give the DataLoader more workers (num_workers), keep "
                  "batches prefetched (prefetch_factor, persistent_workers=True) and move "
                  "per-sample preprocessing out of the training loop.",
    "copy-bound": "Overlap or avoid the copies: load batches into pinned memory "
                  "(DataLoader(pin_memory=True)), copy with .to(device, non_blocking=True) "
                  "and keep tensors on the GPU between steps.",
    "launch-bound": "Cut launch overhead: capture the step in a CUDA graph "
                    "(torch.compile(mode=\"reduce-overhead\")), fuse small ops with "
                    "torch.compile, or give each kernel more work with a larger batch.",
    "GPU-bound": "The GPU is the limit: find the slowest modules and kernels with Nsight "
                 "Compute (torch_nsight.sweep) and speed them up (bf16 tensor cores, fused "
                 "kernels such as scaled_dot_product_attention, torch.compile).",
    "cpu": "The GPU waits on CPU work between long kernels: find it in largest_gaps and "
           "take it off the step (avoid synchronizing calls such as .item() or .cpu(), "
           "precompute or overlap Python work).",
    "pageable": "Copy from pinned memory (DataLoader(pin_memory=True) or tensor.pin_memory()) "
                "with .to(device, non_blocking=True), so the copy overlaps compute.",
    "module": "Compile or graph-capture this module (torch.compile(module, "
              "mode=\"reduce-overhead\")) so its small kernels fuse or launch together.",
}
KERNEL_NEEDS = ("source", "variant", "shape", "run", "kind", "duration_ns", "bytes", "pinned",
                "module", "module_path")
TIMELINE_NEEDS = ("source", "variant", "shape", "run", "kind", "start_ns", "end_ns",
                  "busy_ns", "launches", "sync_ns", "bare_ns", "ranged_ns", "cpu",
                  "prev_module", "next_module")
_KEYS = ["source", *LABELS, "run"]
_SUMS = ("kernels", "kernel_ns", "small", "small_ns", "copies", "copy_ns", "copy_bytes",
         "pageable", "pageable_ns")
_PER_STEP_NAMES = {"kernels": "kernels_per_step", "launches": "launches_per_step",
                   "copies": "copies_per_step", "copy_bytes": "copy_bytes_per_step",
                   "pageable": "pageable_copies_per_step"}
_MEDIANS = ("wall_ns", "busy_ns", "idle_ns", "other_idle_ns", "busy_pct", "idle_pct",
            "kernels", "launches", "launches_per_ms", "small_kernel_pct",
            "small_kernel_time_pct", "copies", "copy_bytes", "copy_gb_per_s", "pageable",
            "copy_ns", "copy_pct", "copy_busy_pct", "data_ns", "data_wait_pct", "sync_pct")


def _keyed(df: pd.DataFrame) -> pd.DataFrame:
    """A copy with the step keys as object dtype, missing ones ``""`` (groupby drops NaN)."""
    out = df.copy()
    for column in _KEYS:
        out[column] = filled(out[column])
    return out


def _positive(values: pd.Series) -> pd.Series:
    """``values`` as floats with zero and negative ones NaN (a safe divisor)."""
    values = values.astype("float64")
    return values.where(values > 0)


def _is_false(value: object) -> bool:
    """Whether ``pinned`` says pageable (False); None (not a host copy) is not."""
    return isinstance(value, bool | np.bool_) and not value


def _is_data_loading(cpu: object) -> bool:
    return isinstance(cpu, str) and any(p in cpu.lower() for p in DATA_LOADING_PATTERNS)


def _text(value: object) -> str:
    return value if isinstance(value, str) else ""


def _duration_text(ns: float) -> str:
    if pd.isna(ns):
        return "n/a"
    if abs(ns) >= 1e6:
        return f"{ns / 1e6:.1f} ms"
    if abs(ns) >= 1e4:
        return f"{ns / 1e3:,.0f} µs"
    return f"{ns / 1e3:.1f} µs"


def _bytes_text(n: float) -> str:
    for scale, unit in ((1e9, "GB"), (1e6, "MB"), (1e3, "kB")):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n:.0f} B"


def _copies_text(n: float) -> str:
    return f"{n:g} {'copy' if n == 1 else 'copies'}"


def _gap_text(gap: pd.Series) -> str:
    """``812 µs before h.0.attn (CPU: aten::linear)``."""
    after, before, cpu = (_text(gap[c]) for c in ("prev_module", "next_module", "cpu"))
    where = (f"before {before}" if before else f"after {after}" if after
             else "with no GPU work in the step")
    return f"{_duration_text(gap['gap_ns'])} {where} (CPU: {cpu or 'outside any op'})"


def _steps(kernels: pd.DataFrame, timeline: pd.DataFrame,
           ) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """Per step: its window, its GPU activity and data waits; also its activities and gaps."""
    steps = _keyed(timeline[timeline["kind"] == "step"]).reset_index(drop=True)
    activity = _keyed(kernels)
    activity = activity.merge(steps[_KEYS].drop_duplicates(), on=_KEYS, how="inner")
    if len(activity) < len(kernels):
        logger.debug("%d GPU activities outside any measured step left out",
                     len(kernels) - len(activity))
    kind, duration = activity["kind"], activity["duration_ns"].astype("float64")
    is_kernel, is_copy = kind == "kernel", kind == "memcpy"
    small = is_kernel & (duration < SMALL_KERNEL_NS)
    pageable = is_copy & activity["pinned"].map(_is_false).astype(bool)
    parts = {"kernels": is_kernel, "small": small, "copies": is_copy, "pageable": pageable}
    for name, mask in parts.items():
        activity[name] = mask.astype("float64")
    for name, mask in {"kernel_ns": is_kernel, "small_ns": small, "copy_ns": is_copy,
                       "pageable_ns": pageable}.items():
        activity[name] = duration.where(mask, 0.0)
    activity["copy_bytes"] = activity["bytes"].astype("float64").where(is_copy, 0.0)
    sums = activity.groupby(_KEYS, sort=False)[list(_SUMS)].sum().reset_index()
    steps = steps.merge(sums, on=_KEYS, how="left")
    gaps = _keyed(timeline[timeline["kind"] == "gap"]).reset_index(drop=True)
    gaps["gap_ns"] = gaps["end_ns"].astype("float64") - gaps["start_ns"].astype("float64")
    gaps["data"] = gaps["cpu"].map(_is_data_loading).astype(bool)
    data = (gaps[gaps["data"]].groupby(_KEYS, sort=False)["gap_ns"].sum().rename("data_ns")
            .reset_index())
    steps = steps.merge(data, on=_KEYS, how="left")
    steps[[*_SUMS, "data_ns"]] = steps[[*_SUMS, "data_ns"]].astype("float64").fillna(0.0)
    wall = steps["end_ns"].astype("float64") - steps["start_ns"].astype("float64")
    busy = steps["busy_ns"].astype("float64")
    steps["wall_ns"], steps["busy_ns"] = wall, busy
    steps["launches"] = steps["launches"].astype("float64")
    steps["idle_ns"] = wall - busy
    steps["other_idle_ns"] = (steps["idle_ns"] - steps["data_ns"]).clip(lower=0.0)
    per_wall = 100.0 / _positive(wall)
    steps["busy_pct"] = busy * per_wall
    steps["idle_pct"] = 100.0 - steps["busy_pct"]
    steps["launches_per_ms"] = steps["launches"] * 1e6 / _positive(wall)
    steps["small_kernel_pct"] = 100.0 * steps["small"] / _positive(steps["kernels"])
    steps["small_kernel_time_pct"] = 100.0 * steps["small_ns"] / _positive(steps["kernel_ns"])
    steps["copy_gb_per_s"] = steps["copy_bytes"] / _positive(steps["copy_ns"])  # B/ns = GB/s
    steps["copy_pct"] = steps["copy_ns"] * per_wall
    steps["copy_busy_pct"] = 100.0 * steps["copy_ns"] / _positive(busy)
    steps["data_wait_pct"] = steps["data_ns"] * per_wall
    steps["sync_pct"] = steps["sync_ns"].astype("float64") * per_wall
    return steps, activity, gaps


def _largest_gaps(steps: pd.DataFrame, gaps: pd.DataFrame) -> pd.Series:
    """Per label, the three largest gaps of its median step (wall nearest the median)."""
    distance = (steps["wall_ns"] - steps.groupby(list(LABELS), sort=False)["wall_ns"]
                .transform("median")).abs()
    median_steps = steps.assign(_d=distance).sort_values("_d", kind="stable")
    median_steps = median_steps.drop_duplicates(subset=list(LABELS))
    texts = {}
    for _, step in median_steps.iterrows():
        mine = gaps[(gaps[_KEYS] == step[_KEYS]).all(axis=1)]
        top = mine.sort_values("gap_ns", ascending=False, kind="stable").head(3)
        texts[(step["variant"], step["shape"])] = "; ".join(_gap_text(g) for _, g in
                                                           top.iterrows())
    return pd.Series(texts, dtype=object)


def _judged(row: pd.Series) -> tuple[float, str]:
    """The GPU busy share the verdict uses, and the step it is a share of: the GPU work
    over the step timed outside the profiler and without ranges, where it was timed (the
    profiler and the ranges lengthen the CPU side only), else the profiled step's share."""
    if row["judged_busy_pct"] == row["judged_busy_pct"] and row["bare_wall_ns"] > 0:
        return row["judged_busy_pct"], (f"{_duration_text(row['bare_wall_ns'])} step timed "
                                        "without the profiler")
    return row["busy_pct"], f"{_duration_text(row['wall_ns'])} step"


def _launch_rule(row: pd.Series) -> bool:
    return bool(_judged(row)[0] < LAUNCH_BUSY_PCT
                and row["small_kernel_pct"] >= SMALL_KERNEL_PCT)


def _copy_rule(row: pd.Series) -> bool:
    return bool(row["copy_pct"] >= COPY_WALL_PCT or row["copy_busy_pct"] >= COPY_BUSY_PCT)


def _decide(row: pd.Series) -> tuple[str, str, str]:
    """The verdict, its evidence and advice; rules in order data, copy, launch, GPU."""
    wall = _duration_text(row["wall_ns"])
    if row["data_wait_pct"] >= DATA_WAIT_PCT:
        return ("data-bound", f"The GPU waited on data loading for {row['data_wait_pct']:.1f}% "
                f"of the {wall} step (data-bound from {DATA_WAIT_PCT:g}%).",
                ADVICE["data-bound"])
    if _copy_rule(row):
        copies = _copies_text(row["copies"])
        return ("copy-bound", f"Copies took {row['copy_pct']:.1f}% of the {wall} step and "
                f"{row['copy_busy_pct']:.1f}% of GPU busy time ({copies} of "
                f"{_bytes_text(row['copy_bytes'])} at {row['copy_gb_per_s']:.1f} GB/s; "
                f"copy-bound from {COPY_WALL_PCT:g}% or {COPY_BUSY_PCT:g}%).",
                ADVICE["copy-bound"])
    counts = (f"{row['kernels']:g} kernels, {row['small_kernel_pct']:.0f}% of them under "
              f"{SMALL_KERNEL_NS / 1e3:g} µs, {row['launches_per_ms']:.1f} launches per ms")
    busy, step = _judged(row)
    if _launch_rule(row):
        return ("launch-bound", f"The GPU was busy {busy:.1f}% (under {LAUNCH_BUSY_PCT:g}%) of "
                f"the {step}, with {counts}.", ADVICE["launch-bound"])
    if busy < LAUNCH_BUSY_PCT:
        return ("CPU-bound", f"The GPU was busy only {busy:.1f}% (under {LAUNCH_BUSY_PCT:g}%) "
                f"of the {step} although most of its kernels are long ({counts}): the CPU "
                "side sets the pace.", ADVICE["cpu"])
    return ("GPU-bound", f"The GPU was busy {busy:.1f}% of the {step}; data "
            f"waits ({row['data_wait_pct']:.1f}%) and copies ({row['copy_pct']:.1f}%) are "
            "under their thresholds.", ADVICE["GPU-bound"])


def _with_caveats(row: pd.Series) -> str:
    """The evidence, with what module ranges and the profiler added to the step."""
    caveats = []
    if row["distorted"]:
        caveats.append(f"module ranges lengthened the step by {row['distortion_pct']:.1f}%, "
                       "so the idle share (and a launch-bound verdict) may be overstated")
    if row["profiler_pct"] > DISTORTION_PCT and not row["bare_wall_ns"] > 0:
        caveats.append(f"the profiler made the step {row['profiler_pct']:.0f}% longer than "
                       f"without it (the GPU is busy {row['bare_busy_pct']:.0f}% of the "
                       "unprofiled step)")
    return "; ".join([row["evidence"][:-1], *caveats]) + "."


def _shapes(kernels: pd.DataFrame, timeline: pd.DataFrame | None, step: str,
            ) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """Medians per label with the verdict, plus the per-step activities and gaps."""
    timeline = pd.DataFrame() if timeline is None else timeline
    check_columns(timeline, TIMELINE_NEEDS, step)
    steps, activity, gaps = _steps(kernels, timeline)
    if steps.empty:
        names = {v: k for k, v in _PER_STEP_NAMES.items()}
        columns = dict.fromkeys([*(names.get(c, c) for c in SUMMARY_COLUMNS), *_MEDIANS])
        return pd.DataFrame(columns=list(columns)), activity, gaps
    labels = steps.groupby(list(LABELS), sort=False)
    out = labels[list(_MEDIANS)].median()
    out["steps"] = labels.size()
    bare, ranged = labels["bare_ns"].median(), labels["ranged_ns"].median()
    out["distortion_pct"] = 100.0 * (ranged - bare) / _positive(bare)
    out["distorted"] = (out["distortion_pct"] > DISTORTION_PCT).astype(bool)
    out["profiler_pct"] = 100.0 * (out["wall_ns"] - ranged) / _positive(ranged)
    out["bare_busy_pct"] = 100.0 * out["busy_ns"] / _positive(bare)
    out["bare_wall_ns"] = bare
    out["judged_busy_pct"] = out["bare_busy_pct"].clip(upper=100.0)
    # idle time a step without profiler or ranges would have, where its time was measured
    bare_idle = (bare - out["busy_ns"] - out["data_ns"]).clip(lower=0.0)
    out["gain_idle_ns"] = bare_idle.mask(bare.isna(), out["other_idle_ns"]).clip(
        upper=out["other_idle_ns"])
    out["largest_gaps"] = _largest_gaps(steps, gaps)
    # the step time's noise over the steps (torch_nsight.analyze.spread)
    # (arrays built by hand: newer pandas refuses an aggregation that returns an array)
    walls = pd.Series([group.to_numpy(dtype="float64") for _, group in labels["wall_ns"]],
                      index=out.index, dtype=object)
    noise = spread(walls)
    out["wall_mean_ns"] = [float(np.mean(w)) for w in walls]
    out["wall_std_ns"], out["wall_ci95_ns"] = noise["std_ns"], noise["ci95_ns"]
    out["stable"] = noise["stable"]
    out = out.reset_index()
    decided = [_decide(row) for _, row in out.iterrows()]
    out["verdict"] = [d[0] for d in decided]
    out["evidence"] = [d[1] for d in decided]
    out["advice"] = [d[2] for d in decided]
    out["evidence"] = [_with_caveats(row) for _, row in out.iterrows()]
    out["largest_gaps"] = out["largest_gaps"].fillna("")
    return out, activity, gaps


@needs(*KERNEL_NEEDS)
def timeline_summary(kernels: pd.DataFrame, timeline: pd.DataFrame | None) -> pd.DataFrame:
    """One verdict per (variant, shape): GPU-, launch-, copy- or data-bound.

    Args:
        kernels: a timeline source's activity table (``Profile.kernels``).
        timeline: its step and gap table (``Profile.timeline``).

    Returns:
        :data:`SUMMARY_COLUMNS`, one row per (variant, shape) in the order its steps first
        appear; numbers are medians over the shape's steps (see ``docs/timeline.md``).

    Raises:
        MissingMetricError: either table lacks a column (an Nsight Compute report has no
            timeline).
    """
    out, _, _ = _shapes(kernels, timeline, "timeline_summary")
    out = out.rename(columns=_PER_STEP_NAMES)
    for column in LABELS:
        out[column] = blank_to_none(out[column])
    return out.loc[:, list(SUMMARY_COLUMNS)].reset_index(drop=True)


def _truncate(paths: pd.Series, depth: int) -> pd.Series:
    paths = filled(paths, UNATTRIBUTED).astype(str)
    return paths.map(lambda p: path_prefix(p, depth))


def _module_table(activity: pd.DataFrame, depth: int, steps: pd.DataFrame) -> pd.DataFrame:
    """Per label and truncated module path: launches, kernels, GPU time per step."""
    work = activity.assign(module_path=_truncate(activity["module_path"], depth),
                           _kernel=(activity["kind"] == "kernel").astype("float64"),
                           _small=((activity["kind"] == "kernel")
                                   & (activity["duration_ns"] < SMALL_KERNEL_NS))
                           .astype("float64"),
                           _kernel_ns=activity["duration_ns"].where(
                               activity["kind"] == "kernel"))
    keys = [*LABELS, "module_path"]
    out = work.groupby(keys, sort=False).agg(
        launches=("duration_ns", "size"), kernels=("_kernel", "sum"),
        gpu_ns=("duration_ns", "sum"), small=("_small", "sum"),
        median_kernel_ns=("_kernel_ns", "median")).reset_index()
    out = out.merge(steps, on=list(LABELS), how="left")
    out["small_kernel_pct"] = 100.0 * out["small"] / _positive(out["kernels"])
    per_step = ["launches", "kernels", "gpu_ns"]
    out[per_step] = out[per_step].astype("float64").div(out["steps"], axis=0)
    totals = out.groupby(list(LABELS), sort=False)["gpu_ns"].transform("sum")
    out["pct_of_gpu"] = 100.0 * out["gpu_ns"] / _positive(totals)
    out["module"] = out["module_path"].map(path_leaf)
    order = {label: i for i, label in enumerate(dict.fromkeys(zip(out["variant"],
                                                                  out["shape"], strict=True)))}
    out["_order"] = [order[label] for label in zip(out["variant"], out["shape"], strict=True)]
    out = out.sort_values(["_order", "gpu_ns"], ascending=[True, False], kind="stable")
    return out.loc[:, list(MODULE_LAUNCH_COLUMNS)].reset_index(drop=True)


@needs("source", "variant", "shape", "run", "kind", "duration_ns", "module_path")
def module_launches(kernels: pd.DataFrame, depth: int = 1) -> pd.DataFrame:
    """GPU time and launches per step of each top-level module.

    Args:
        kernels: a timeline source's activity table (``Profile.kernels``).
        depth: module level kept (root = 0, its children = 1); deeper ones fold into it.

    Returns:
        :data:`MODULE_LAUNCH_COLUMNS`, per (variant, shape) in the order they first appear,
        most GPU time first: ``launches`` (GPU activities of any kind), ``kernels`` and
        ``gpu_ns`` (of all its activities) per step, where the steps are the label's distinct ``(source, run)``
        pairs; the share of the label's GPU time; the median kernel's duration and the
        share of kernels under :data:`SMALL_KERNEL_NS`.

    Raises:
        ValueError: ``depth`` is negative.
        MissingMetricError: the table lacks a column.
    """
    if depth < 0:
        raise ValueError(f"depth must be >= 0, got {depth}")
    activity = _keyed(kernels)
    steps = (activity[_KEYS].drop_duplicates().groupby(list(LABELS), sort=False).size()
             .rename("steps").reset_index())
    out = _module_table(activity, depth, steps)
    for column in LABELS:
        out[column] = blank_to_none(out[column])
    return out


def _most(frame: pd.DataFrame, column: str, weight: str) -> str | None:
    """The value of ``column`` holding the most ``weight`` (the first on ties)."""
    values = frame[column].astype(object)
    frame = frame[values.notna() & (values != "")]
    if frame.empty:
        return None
    return str(frame.groupby(column, sort=False)[weight].sum().idxmax())


def _label_findings(shape: pd.Series, activity: pd.DataFrame, gaps: pd.DataFrame,
                    modules: pd.DataFrame) -> list[dict[str, object]]:
    """The findings of one (variant, shape) from its medians, activities and gaps."""
    rows: list[dict[str, object]] = []
    # the step the gains are shares of: timed without the profiler where it was
    step_ns = shape["bare_wall_ns"] if shape["bare_wall_ns"] > 0 else shape["wall_ns"]

    def add(finding: str, module: str | None, level: str | None, evidence: str, fix: str,
            gain: float) -> None:
        gain = min(float(gain), float(step_ns))  # no fix saves more than the whole step
        rows.append({"variant": shape["variant"], "shape": shape["shape"], "module": module,
                     "module_level": level if module is not None else None,
                     "finding": finding, "evidence": evidence, "fix": fix,
                     "est_gain_ns": gain, "gain_basis": "timeline",
                     "pct_of_step": 100.0 * gain / step_ns if step_ns > 0 else float("nan")})

    steps, wall = shape["steps"], _judged(shape)[1]
    if shape["data_wait_pct"] >= FINDING_PCT:
        cpu = _most(gaps[gaps["data"]], "cpu", "gap_ns")
        add("data_wait", None, None, f"The GPU idled {shape['data_wait_pct']:.1f}% of the "
            f"{_duration_text(shape['wall_ns'])} step ({_duration_text(shape['data_ns'])}) "
            "while the CPU loaded data "
            f"(mostly in {cpu}).", ADVICE["data-bound"], shape["data_ns"])
    if _copy_rule(shape):
        add("copy_bound", _most(activity[activity["copies"] > 0], "module", "duration_ns"),
            "innermost", f"Copies took {shape['copy_pct']:.1f}% of the "
            f"{_duration_text(shape['wall_ns'])} step and "
            f"{shape['copy_busy_pct']:.1f}% of GPU busy time "
            f"({_duration_text(shape['copy_ns'])} per step).", ADVICE["copy-bound"],
            shape["copy_ns"])
    pageable = activity[activity["pageable"] > 0]
    if len(pageable):
        time = pageable["duration_ns"].sum() / steps
        add("pageable_copies", _most(pageable, "module", "duration_ns"), "innermost",
            f"{_copies_text(len(pageable) / steps)} per step "
            f"({_bytes_text(pageable['copy_bytes'].sum() / steps)}, {_duration_text(time)}) "
            "use pageable host memory, which the launching thread waits for.",
            ADVICE["pageable"], time)
    gain, scale = shape["gain_idle_ns"], shape["gain_idle_ns"] / shape["other_idle_ns"]
    idle_pct = 100.0 * gain / step_ns  # of the step the verdict judges
    if _launch_rule(shape):
        root = activity.assign(_root=_truncate(activity["module_path"], 0))
        add("launch_bound", _most(root[root["_root"] != UNATTRIBUTED], "_root", "duration_ns"),
            "root", f"The GPU was idle {idle_pct:.1f}% of the {wall} outside data loading "
            f"with {shape['kernels']:g} kernels, {shape['small_kernel_pct']:.0f}% of them "
            f"under {SMALL_KERNEL_NS / 1e3:g} µs, and {shape['launches_per_ms']:.1f} launches "
            "per ms.", ADVICE["launch-bound"], gain)
    elif idle_pct >= FINDING_PCT:
        other = gaps[~gaps["data"]]
        module = _most(other, "next_module", "gap_ns")
        before = other.loc[other["next_module"] == module, "gap_ns"].sum() / steps
        where = (f", {_duration_text(before)} per step of it just before {module}" if module
                 else "")
        add("gpu_idle", module, "innermost", f"The GPU was idle {idle_pct:.1f}% of the {wall} "
            f"outside data loading{where}.", ADVICE["cpu"], gain)
    busy_modules = modules[(modules["launches"] >= MODULE_LAUNCHES)
                           & (modules["median_kernel_ns"] < SMALL_KERNEL_NS)
                           & (modules["module_path"] != UNATTRIBUTED)]
    for _, module in busy_modules.iterrows():
        before = gaps[(gaps["top"] == module["module_path"]) & ~gaps["data"]]
        idle = before["gap_ns"].sum() / steps
        add("small_kernels", module["module"], "top-level",
            f"{module['module']} issues {module['launches']:g} launches per step with a "
            f"median kernel of {_duration_text(module['median_kernel_ns'])}; the GPU idles "
            f"{_duration_text(idle)} per step just before its work.", ADVICE["module"],
            idle * (scale if pd.notna(scale) else 1.0))
    return rows


@needs(*KERNEL_NEEDS)
def timeline_findings(kernels: pd.DataFrame, timeline: pd.DataFrame | None) -> pd.DataFrame:
    """Every timeline finding per (variant, shape), with a fix and the time it may recover.

    The copy and launch rules of :func:`timeline_summary` are findings wherever they hold,
    whichever rule decided the verdict; a data wait or other idle time is one from
    :data:`FINDING_PCT` of the step; any pageable copy is one; and each top-level module
    with many short launches gets a ``small_kernels`` row (``docs/timeline.md``).

    Args:
        kernels: a timeline source's activity table (``Profile.kernels``).
        timeline: its step and gap table (``Profile.timeline``).

    Returns:
        :data:`FINDING_COLUMNS`, per (variant, shape) in the order its steps first appear,
        the largest ``est_gain_ns`` (time per step) first. ``module_level`` says which
        module ``module`` names: ``root`` (the model), ``top-level`` (a child of the root)
        or ``innermost``; None where the finding is outside the model. Gains of different
        findings may overlap; do not add them up.

    Raises:
        MissingMetricError: either table lacks a column.
    """
    shapes, activity, gaps = _shapes(kernels, timeline, "timeline_findings")
    if shapes.empty:
        return pd.DataFrame(columns=list(FINDING_COLUMNS))
    modules = _module_table(activity, 1, shapes[[*LABELS, "steps"]])
    names = activity[[*LABELS, "module", "module_path"]].copy()
    names["module"] = filled(names["module"])
    names = names.drop_duplicates(subset=[*LABELS, "module"])
    names["top"] = _truncate(names["module_path"], 1)
    gaps = gaps.assign(next_module=filled(gaps["next_module"]))
    gaps = gaps.merge(names.rename(columns={"module": "next_module"})[
        [*LABELS, "next_module", "top"]], on=[*LABELS, "next_module"], how="left")
    rows: list[dict[str, object]] = []
    for _, shape in shapes.iterrows():
        def mine(frame: pd.DataFrame, shape: pd.Series = shape) -> pd.DataFrame:
            return frame[(frame["variant"] == shape["variant"])
                         & (frame["shape"] == shape["shape"])]
        found = _label_findings(shape, mine(activity), mine(gaps), mine(modules))
        rows.extend(sorted(found, key=lambda r: -cast(float, r["est_gain_ns"])
                           if pd.notna(r["est_gain_ns"]) else float("inf")))
    out = pd.DataFrame(rows, columns=list(FINDING_COLUMNS))
    for column in (*LABELS, "module", "module_level"):
        out[column] = blank_to_none(filled(out[column]))
    return out
