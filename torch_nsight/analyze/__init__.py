"""Analyze stage: DataFrame in, DataFrame out (pandas only; no reader, no torch).

Each step is a stateless function ``df = step(df, ...)`` that can be used and tested alone.
:func:`analyze` composes the per-kernel steps in order; the rollups (:func:`module_tree`,
:func:`hotspots`, :func:`normalize`, :func:`coverage`, :func:`by_kernel`,
:func:`by_shape`, :func:`by_rank`) summarise the result.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from torch_nsight.analyze.analytic import fill_flops_from_calls, fill_flops_from_inductor
from torch_nsight.analyze.attribute import attribute, label_rows, label_shapes
from torch_nsight.analyze.call_attribution import attribute_calls
from torch_nsight.analyze.classify import classify, sol_title
from torch_nsight.analyze.columns import check_columns, needs
from torch_nsight.analyze.derive import derive_columns
from torch_nsight.analyze.findings import findings, fold_findings
from torch_nsight.analyze.findings.by_change import by_change
from torch_nsight.analyze.fold import fold_tree
from torch_nsight.analyze.groups import by_kernel, by_rank, by_shape, has_ranks
from torch_nsight.analyze.hotspots import hotspots, kernel_hotspots, next_step_code
from torch_nsight.analyze.limiter import add_limiter
from torch_nsight.analyze.normalize import normalize
from torch_nsight.analyze.occupancy import add_occupancy
from torch_nsight.analyze.ops import name_aten_ops
from torch_nsight.analyze.regress import compare_profiles
from torch_nsight.analyze.replicas import expand_replicas
from torch_nsight.analyze.rollup import coverage, module_tree
from torch_nsight.analyze.roofline import add_flops, add_peaks, add_roofline
from torch_nsight.analyze.steps import module_launches
from torch_nsight.analyze.timeline_analysis import timeline_findings, timeline_summary
from torch_nsight.vocabulary import UNATTRIBUTED

__all__ = [
    "analyze", "attribute", "attribute_calls", "expand_replicas", "derive_columns",
    "needs", "check_columns", "label_shapes", "label_rows", "add_flops", "add_peaks", "add_roofline",
    "classify", "sol_title", "add_occupancy", "add_limiter", "module_tree", "coverage", "hotspots", "kernel_hotspots",
    "next_step_code", "normalize", "compare_profiles", "by_kernel", "by_shape", "by_rank",
    "has_ranks", "timeline_summary", "timeline_findings", "module_launches", "findings",
    "fold_findings", "fold_tree", "by_change",
    "UNATTRIBUTED",
]


def analyze(df: pd.DataFrame, replication: Sequence[Mapping[str, Any]] = (), *,
            calls: pd.DataFrame | None = None,
            settings: Mapping[str, Any] | None = None) -> pd.DataFrame:
    """Attribute, copy replicated rows, count FLOPs, add peaks, place on the roofline,
    classify every kernel and name what limits the latency-bound ones.

    Args:
        df: a raw kernel table (see :func:`torch_nsight.report.kernel_table.empty_raw_table`).
        replication: sibling groups whose representative's rows stand for the replicas
            (see :func:`expand_replicas`); the copies are made before the per-kernel
            analysis, so every later step sees every row.
        calls: the attributed calls table: its analytic FLOPs stand in where the FLOP
            counters were not collected (:func:`fill_flops_from_calls`), and its aten ops
            name the kernels (``aten_ops``, :func:`name_aten_ops`). Compiled kernels take
            their kernel maps' FLOPs instead (:func:`fill_flops_from_inductor`).
        settings: the profiled process's PyTorch settings (TF32).

    Returns:
        The table with every per-kernel analysis column added.

    Raises:
        MissingMetricError: the table lacks a column a step needs.
    """
    df = expand_replicas(attribute(df), replication)
    df = fill_flops_from_calls(add_flops(name_aten_ops(df, calls)), calls, settings)
    df = fill_flops_from_inductor(df, settings)
    for step in (add_peaks, add_roofline, classify, add_occupancy, add_limiter):
        df = step(df)
    return df
