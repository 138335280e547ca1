"""The front door: prepare the tables once, run every registered check in order, word each
finding, add the timeline's and Nsight Compute's own, rank by gain."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pandas as pd

import torch_nsight.analyze.findings.elementwise_chain
import torch_nsight.analyze.findings.fp32_no_tensor_cores

# the checks register themselves on import, in this order (small_grid last: it skips the
# kernels the others reported)
import torch_nsight.analyze.findings.gemm_misaligned
import torch_nsight.analyze.findings.layout_conversion
import torch_nsight.analyze.findings.small_grid  # noqa: F401
from torch_nsight.analyze.columns import needs
from torch_nsight.analyze.findings.calls import calls_where, heavy_calls
from torch_nsight.analyze.findings.prepare import prepare
from torch_nsight.analyze.findings.registry import Context, Found, Registered, run_checks
from torch_nsight.analyze.fold import FOLD_COLUMN, fold_rows
from torch_nsight.analyze.frames import blank_to_none, filled
from torch_nsight.analyze.rules import rule_findings
from torch_nsight.analyze.timeline_analysis import timeline_findings
from torch_nsight.vocabulary import FINDING_COLUMNS, LABELS, SITE_KEYS


def _row(registered: Registered, found: Found) -> dict[str, Any]:
    """A finding as a row of :data:`FINDING_COLUMNS`, worded."""
    rows, basis = found.rows, found.basis
    first = rows.iloc[0]
    if basis == "roofline":  # say where a weaker ceiling stands in
        if (rows["roof_basis"] == "compute").any():
            basis = "compute roof"
        if (rows["peak_basis"] == "table").any():
            basis += ", known-GPU peaks"
    evidence, fix = registered.says(found.facts)
    return {**{k: first[k] for k in SITE_KEYS}, "kernels": "; ".join(dict.fromkeys(rows["kernel"])),
            "finding": registered.name, "evidence": evidence, "fix": fix,
            "est_gain_ns": found.gain_ns, "gain_basis": basis, "confidence": found.confidence}


def _timeline_rows(kernels: pd.DataFrame, timeline: pd.DataFrame) -> list[dict[str, Any]]:
    """:func:`timeline_findings` rows in these columns (``module_path`` looked up where the
    module's name is unique in its label)."""
    paths = kernels.reindex(columns=[*LABELS, "module", "module_path"]).dropna(
        subset=["module", "module_path"]).drop_duplicates()
    rows = []
    for _, found in timeline_findings(kernels, timeline).iterrows():
        mine = paths[(paths["module"] == found["module"])
                     & (paths["variant"].fillna("") == (found["variant"] or ""))
                     & (paths["shape"].fillna("") == (found["shape"] or ""))]
        path = mine["module_path"].iloc[0] if mine["module_path"].nunique() == 1 else None
        rows.append({"variant": found["variant"], "shape": found["shape"],
                     "module": found["module"], "module_path": path, "direction": None,
                     "op": None, "kernels": None, "finding": found["finding"],
                     "evidence": found["evidence"], "fix": found["fix"],
                     "est_gain_ns": found["est_gain_ns"], "gain_basis": "timeline",
                     "confidence": "medium"})
    return rows
@needs("variant", "shape", "module", "module_path", "direction", "kernel", "duration_ns")
def findings(kernels: pd.DataFrame, calls: pd.DataFrame | None = None,
             settings: Mapping[str, Any] | None = None,
             timeline: pd.DataFrame | None = None) -> pd.DataFrame:
    """The fixes worth making, ranked by the time per run each may recover.

    Args:
        kernels: an analyzed kernel table (``Profile.kernels``); columns a source lacks
            (FLOP counters, waves, peaks) only silence the checks that read them.
        calls: the calls table (``Profile.calls``), whose GEMM shapes name the misaligned
            dimension; None falls back to kernel names.
        settings: the PyTorch settings recorded with the profile (``Profile.meta.settings``),
            for the TF32 switches; None: unknown.
        timeline: a timeline source's step and gap table (``Profile.timeline``): its
            findings are added with ``gain_basis`` ``timeline``.

    Returns:
        :data:`FINDING_COLUMNS`, one row per finding, the largest ``est_gain_ns`` first
        (unknown gains last). Times are per run of each (variant, shape). Gains of
        findings on the same kernels or steps may overlap: do not add them up.

    Raises:
        MissingMetricError: ``kernels`` lacks a column every check needs.
    """
    heavy = heavy_calls(calls)
    context = Context(prepare(kernels), heavy, calls_where(heavy), settings or {},
                      claimed=pd.Index([]))
    rows = [_row(registered, found) for registered, found in run_checks(context)]
    if timeline is not None and len(kernels):  # a trace without GPU rows has no GPU to judge
        rows += _timeline_rows(kernels, timeline)
    out = pd.DataFrame(rows, columns=list(FINDING_COLUMNS))
    rules = rule_findings(kernels)
    if not rules.empty:  # Nsight Compute's own estimates, where its sections were recorded
        out = pd.concat([out, rules], ignore_index=True) if len(out) else rules.copy()
    out["est_gain_ns"] = out["est_gain_ns"].astype("float64")
    out = out.sort_values("est_gain_ns", ascending=False, na_position="last", kind="stable")
    for column in (*SITE_KEYS, "kernels"):
        out[column] = blank_to_none(filled(out[column]))
    return out.reset_index(drop=True)


def fold_findings(found: pd.DataFrame) -> pd.DataFrame:
    """One row for a finding repeated in each block of a repeated structure: its gain the
    sum of the blocks', its evidence (prefixed "In each of the N blocks") and fix those of
    the block with the largest gain, and ``blocks`` how many it stands for (see
    :mod:`torch_nsight.analyze.fold`).

    Args:
        found: :func:`findings` rows.

    Returns:
        The folded rows, the largest ``est_gain_ns`` first.
    """
    folded = fold_rows(found, keys=("variant", "shape", "direction", "op", "finding"),
                       sums=("est_gain_ns",), rank="est_gain_ns")
    # the evidence is one block's; the gain is all of theirs: say so
    several = folded[FOLD_COLUMN] > 1
    folded.loc[several, "evidence"] = [
        f"In each of the {n} blocks (the gain is theirs together): {text}"
        for n, text in zip(folded.loc[several, FOLD_COLUMN], folded.loc[several, "evidence"],
                           strict=True)]
    return folded.sort_values("est_gain_ns", ascending=False, na_position="last",
                              kind="stable").reset_index(drop=True)
