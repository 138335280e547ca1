"""Analyze stage: DataFrame in, DataFrame out (pandas only; no reader, no torch).

Each step is a stateless function ``df = step(df, ...)`` that can be used and tested alone.
:func:`analyze` composes the per-kernel steps in order; the rollups (:func:`module_tree`,
:func:`hotspots`, :func:`normalize`, :func:`coverage`) summarise the result.
"""

from __future__ import annotations

import pandas as pd

from torch_nsight.analyze.attribute import UNATTRIBUTED, attribute, label_shapes
from torch_nsight.analyze.classify import classify, sol_title
from torch_nsight.analyze.compare import normalize
from torch_nsight.analyze.hotspots import hotspots, kernel_hotspots, next_step
from torch_nsight.analyze.rollup import coverage, module_tree
from torch_nsight.analyze.roofline import add_flops, add_peaks, add_roofline

__all__ = [
    "analyze", "attribute", "label_shapes", "add_flops", "add_peaks", "add_roofline",
    "classify", "sol_title", "module_tree", "coverage", "hotspots", "kernel_hotspots",
    "next_step", "normalize", "UNATTRIBUTED",
]


def analyze(df: pd.DataFrame) -> pd.DataFrame:
    """Attribute, count FLOPs, add peaks, place on the roofline and classify every kernel.

    Args:
        df: a raw kernel table from :func:`torch_nsight.report.read_report`.

    Returns:
        The table with every per-kernel analysis column added.
    """
    for step in (attribute, add_flops, add_peaks, add_roofline, classify):
        df = step(df)
    return df
