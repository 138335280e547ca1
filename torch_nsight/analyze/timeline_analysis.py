"""Timeline verdicts and findings: is each shape GPU-, CPU-, launch-, copy- or data-bound,
and what could it recover?

The two public passes read as their phases: the numbers of each step and their medians per
shape (:mod:`~torch_nsight.analyze.steps`), the rules that judge them
(:mod:`~torch_nsight.analyze.verdicts`); codes and numbers only: the words are render's
(:mod:`torch_nsight.render.timeline_words`).
Rules, thresholds and their reasons are in ``docs/timeline.md``.
"""

from __future__ import annotations

from typing import Any, cast

import pandas as pd

from torch_nsight.analyze.columns import needs
from torch_nsight.analyze.frames import blank_to_none, filled, plain
from torch_nsight.analyze.steps import (
    KERNEL_NEEDS,
    StepTables,
    gaps_with_modules,
    median_step_gaps,
    module_table,
    shape_table,
    step_table,
)
from torch_nsight.analyze.verdicts import (
    decide_advice,
    decide_verdict,
    is_distorted,
    label_findings,
)
from torch_nsight.vocabulary import LABELS

SUMMARY_COLUMNS = (
    "variant", "shape", "steps", "wall_ns", "busy_pct", "idle_pct", "kernels_per_step",
    "launches_per_step", "launches_per_ms", "small_kernel_pct", "small_kernel_time_pct",
    "copies_per_step", "copy_bytes_per_step", "copy_gb_per_s", "pageable_copies_per_step",
    "copy_pct", "copy_busy_pct", "data_wait_pct", "sync_pct", "largest_gaps",
    "distortion_pct", "profiler_pct", "bare_busy_pct", "bare_spread_pct", "verdict",
    "advice_code", "distorted", "wall_mean_ns", "wall_std_ns", "wall_ci95_ns", "stable", "facts",
)
#: The timeline's own findings: where (the module and its level in the tree), what, and the
#: share of the step. :func:`torch_nsight.analyze.findings` turns each into a row of the one
#: finding schema, :data:`torch_nsight.vocabulary.FINDING_COLUMNS`.
STEP_FINDING_COLUMNS = ("variant", "shape", "module", "module_level", "finding", "facts",
                        "est_gain_ns", "gain_basis", "pct_of_step")
#: What a largest gap of :data:`SUMMARY_COLUMNS`' ``largest_gaps`` holds.
GAP_FIELDS = ("gap_ns", "prev_module", "next_module", "cpu")
#: Medians per step, named per step in the summary.
_PER_STEP_NAMES = {"kernels": "kernels_per_step", "launches": "launches_per_step",
                   "copies": "copies_per_step", "copy_bytes": "copy_bytes_per_step",
                   "pageable": "pageable_copies_per_step"}


def _labelled(out: pd.DataFrame, columns: tuple[str, ...]) -> pd.DataFrame:
    """``columns`` of ``out``, the blank labels None."""
    for column in columns:
        out[column] = blank_to_none(filled(out[column]))
    return out


@needs(*KERNEL_NEEDS)
def timeline_summary(kernels: pd.DataFrame, timeline: pd.DataFrame | None,
                     tables: StepTables | None = None) -> pd.DataFrame:
    """One verdict per (variant, shape): GPU-, CPU-, launch-, copy- or data-bound.

    Args:
        kernels: a timeline source's activity table (``Profile.kernels``).
        timeline: its step and gap table (``Profile.timeline``).
        tables: :func:`step_table` of the two, where the caller has it (the verdicts and
            the findings of one profile share it).

    Returns:
        :data:`SUMMARY_COLUMNS`, one row per (variant, shape) in the order its steps first
        appear; numbers are medians over the shape's steps (see ``docs/timeline.md``). No
        rows for a trace in which nothing ran on a GPU (recorded without a CUDA device).

    Raises:
        MissingMetricError: either table lacks a column (an Nsight Compute report has no
            timeline).
    """
    steps, _, gaps = _on_a_gpu(*(tables or step_table(kernels, timeline, "timeline_summary")))
    if steps.empty:
        return _labelled(pd.DataFrame(columns=list(SUMMARY_COLUMNS)), LABELS)
    out = shape_table(steps)
    out["distorted"] = is_distorted(out)
    out["verdict"] = [decide_verdict(row) for _, row in out.iterrows()]
    # every median the rules read, by the rules' names: what render words a verdict from
    out["facts"] = pd.Series([plain(row.to_dict()) for _, row in out.iterrows()],
                             index=out.index, dtype=object)
    out["advice_code"] = [decide_advice(row) for _, row in out.iterrows()]
    largest: dict[tuple[Any, Any], list[dict[str, Any]]] = {}
    for _, gap in median_step_gaps(steps, gaps).iterrows():
        largest.setdefault((gap["variant"], gap["shape"]), []).append(
            plain({f: gap[f] for f in GAP_FIELDS}))
    out["largest_gaps"] = pd.Series(
        [largest.get(label, []) for label in zip(out["variant"], out["shape"], strict=True)],
        index=out.index, dtype=object)
    out = _labelled(out.rename(columns=_PER_STEP_NAMES), LABELS)
    return out.loc[:, list(SUMMARY_COLUMNS)].reset_index(drop=True)


def _on_a_gpu(steps: pd.DataFrame, activity: pd.DataFrame, gaps: pd.DataFrame
              ) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """The tables without the traces in which no step launched or ran anything on a GPU
    (recorded on the CPU): they have no GPU side to judge."""
    used = (steps["launches"].fillna(0) > 0) | (steps["busy_ns"].fillna(0) > 0)
    on_gpu = set(steps.loc[used, "source"])
    return steps[steps["source"].isin(on_gpu)], activity, gaps[gaps["source"].isin(on_gpu)]


def _by_label(frame: pd.DataFrame) -> dict[tuple[Any, Any], pd.DataFrame]:
    """``frame``'s rows per (variant, shape), as the shape table's keys read them."""
    if frame.empty:
        return {}
    groups = frame.groupby(["variant", "shape"], sort=False, dropna=False)
    return {key: part for key, part in groups}


@needs(*KERNEL_NEEDS)
def timeline_findings(kernels: pd.DataFrame, timeline: pd.DataFrame | None,
                      tables: StepTables | None = None) -> pd.DataFrame:
    """Every timeline finding per (variant, shape), with a fix and the time it may recover.

    The copy and launch rules of :func:`timeline_summary` are findings wherever they hold,
    whichever rule decided the verdict; a data wait or other idle time is one from
    :data:`~torch_nsight.analyze.verdicts.FINDING_PCT` of the step; any pageable copy is
    one; and each top-level module with many short launches gets a ``small_kernels`` row
    (``docs/timeline.md``).

    Args:
        kernels: a timeline source's activity table (``Profile.kernels``).
        timeline: its step and gap table (``Profile.timeline``).
        tables: :func:`step_table` of the two, where the caller has it.

    Returns:
        :data:`STEP_FINDING_COLUMNS`, per (variant, shape) in the order its steps first appear,
        the largest ``est_gain_ns`` (time per step) first. ``module_level`` says which
        module ``module`` names: ``root`` (the model), ``top-level`` (a child of the root)
        or ``innermost``; None where the finding is outside the model. Gains of different
        findings may overlap; do not add them up. None for a trace in which nothing ran
        on a GPU.

    Raises:
        MissingMetricError: either table lacks a column.
    """
    steps, activity, gaps = _on_a_gpu(*(tables or step_table(kernels, timeline,
                                                              "timeline_findings")))
    if steps.empty:
        return pd.DataFrame(columns=list(STEP_FINDING_COLUMNS))
    shapes = shape_table(steps)
    modules = module_table(activity, 1, shapes[[*LABELS, "steps"]])
    gaps = gaps_with_modules(activity, gaps)
    rows: list[dict[str, Any]] = []
    # each table split by (variant, shape) once: filtering it again for each of many shapes
    # is quadratic in them
    parts = [_by_label(frame) for frame in (activity, gaps, modules)]
    for _, shape in shapes.iterrows():
        key = (shape["variant"], shape["shape"])
        found = label_findings(shape, *(part.get(key, frame.iloc[:0]) for part, frame in
                                        zip(parts, (activity, gaps, modules), strict=True)))
        numbers = plain(shape.to_dict())
        for row in found:
            row.update(variant=shape["variant"], shape=shape["shape"], gain_basis="timeline",
                       facts={"found": plain(dict(row)), "shape": numbers})
        rows.extend(sorted(found, key=lambda r: -cast(float, r["est_gain_ns"])
                           if pd.notna(r["est_gain_ns"]) else float("inf")))
    out = pd.DataFrame(rows, columns=list(STEP_FINDING_COLUMNS))
    return _labelled(out, (*LABELS, "module", "module_level"))
