"""The front door: prepare the tables once, run every registered check in order, attach
Nsight Compute's rules as evidence, add the timeline's findings, rank by gain. The table is
codes and numbers (:data:`~torch_nsight.vocabulary.FINDING_RECORD_COLUMNS`); render words it
(:func:`torch_nsight.render.finding_words.word_findings`, which
:meth:`torch_nsight.Profile.findings` applies)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

import torch_nsight.analyze.findings.conv_no_tensor_cores
import torch_nsight.analyze.findings.elementwise_chain
import torch_nsight.analyze.findings.fp32_no_tensor_cores

# the checks register themselves on import, in this order (the optimizer's before the
# chains, small_grid last: it skips the kernels the others reported)
import torch_nsight.analyze.findings.gemm_misaligned
import torch_nsight.analyze.findings.layout_conversion
import torch_nsight.analyze.findings.nchw_kernels
import torch_nsight.analyze.findings.optimizer_step
import torch_nsight.analyze.findings.small_grid  # noqa: F401
from torch_nsight.analyze.columns import needs
from torch_nsight.analyze.findings.call_shapes import calls_where, heavy_calls
from torch_nsight.analyze.findings.cast_first import cast_first
from torch_nsight.analyze.findings.prepare import prepare
from torch_nsight.analyze.findings.record import Finding
from torch_nsight.analyze.findings.registry import Context, run_checks
from torch_nsight.analyze.findings.sites import describe_sites, root_class, short_class
from torch_nsight.analyze.fold import FOLD_COLUMN, STRUCTURE_COLUMN, fold_rows, with_structure
from torch_nsight.analyze.frames import blank_to_none, filled
from torch_nsight.analyze.rules import rule_evidence
from torch_nsight.analyze.timeline_analysis import timeline_findings
from torch_nsight.vocabulary import (
    FINDING_CODE_COLUMNS,
    FINDING_RECORD_COLUMNS,
    LABELS,
    SITE_KEYS,
)

#: The key of a timeline finding's facts (its numbers and its shape's medians,
#: :func:`timeline_findings`) in the finding table's ``facts``: render words them.
TIMELINE_FACTS = "timeline"


def _row(found: Finding, context: Context) -> dict[str, Any]:
    """A finding as a row of :data:`FINDING_RECORD_COLUMNS`."""
    rows, basis = found.rows, found.basis
    first = rows.iloc[0]
    if basis == "roofline":  # say where a weaker ceiling stands in
        if (rows["roof_basis"] == "compute").any():
            basis = "compute roof"
        if (rows["peak_basis"] == "table").any():
            basis += ", known-GPU peaks"
    codes = found.codes()
    if codes["module_class"] is None:
        codes["module_class"] = (short_class(context.site(rows).module_class)
                                 or root_class(first["module_path"]))
    rules = rule_evidence(rows)
    if rules:  # Nsight Compute's own diagnosis of these kernels: evidence, never the fix
        codes["facts"]["ncu_rules"] = rules
    return {**{k: first[k] for k in SITE_KEYS},
            "kernels": "; ".join(dict.fromkeys(rows["kernel"])), "finding": found.finding,
            **codes, "est_gain_ns": found.gain_ns, "gain_bound_ns": found.bound_ns,
            "gain_basis": basis,
            "confidence": found.confidence}


def _timeline_rows(kernels: pd.DataFrame, timeline: pd.DataFrame) -> list[dict[str, Any]]:
    """:func:`timeline_findings` rows in these columns (``module_path`` looked up where the
    module's name is unique in its label); their numbers in ``facts`` under
    :data:`TIMELINE_FACTS`."""
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
                     **dict.fromkeys(FINDING_CODE_COLUMNS),
                     "facts": {TIMELINE_FACTS: found["facts"]},
                     "fix_params": {}, "est_gain_ns": found["est_gain_ns"],
                     "gain_bound_ns": float("nan"),
                     "gain_basis": "timeline", "confidence": "medium"})
    return rows


@needs("variant", "shape", "module", "module_path", "direction", "kernel", "duration_ns")
def findings(kernels: pd.DataFrame, calls: pd.DataFrame | None = None,
             settings: Mapping[str, Any] | None = None,
             timeline: pd.DataFrame | None = None) -> pd.DataFrame:
    """The fixes worth making, as codes, ranked by the time per run each may recover.

    Args:
        kernels: an analyzed kernel table (``Profile.kernels``); columns a source lacks
            (FLOP counters, waves, peaks) only silence the checks that read them.
        calls: the calls table (``Profile.calls``): the ops that make a module's kind and
            the shapes that name the dimension at fault; None falls back to kernel names.
        settings: the PyTorch settings recorded with the profile (``Profile.meta.settings``),
            for the TF32 switches and ``cudnn.benchmark``; None: unknown.
        timeline: a timeline source's step and gap table (``Profile.timeline``): its
            findings are added with ``gain_basis`` ``timeline``.

    Returns:
        :data:`~torch_nsight.vocabulary.FINDING_RECORD_COLUMNS`, one row per finding, in
        :func:`ranked` order. Times are per run of each (variant, shape). Gains of findings on the same kernels or steps may overlap: do
        not add them up. No words: render writes ``evidence`` and ``fix`` from the codes
        (:func:`torch_nsight.render.finding_words.word_findings`).

    Raises:
        MissingMetricError: ``kernels`` lacks a column every check needs.
    """
    heavy = heavy_calls(calls)
    work = prepare(kernels)
    context = Context(work, heavy, calls_where(heavy), describe_sites(work, calls),
                      calls is not None and "aten_op" in calls and len(calls) > 0,
                      settings or {}, claimed=pd.Index([]))
    rows = [_row(found, context) for found in run_checks(context)]
    if timeline is not None and len(kernels):  # a trace without GPU rows has no GPU to judge
        rows += _timeline_rows(kernels, timeline)
    out = pd.DataFrame(rows, columns=list(FINDING_RECORD_COLUMNS))
    for column in FINDING_CODE_COLUMNS:  # codes as they were made: 49, not 49.0
        out[column] = pd.Series([row[column] for row in rows], index=out.index, dtype=object)
    out = cast_first(out)  # a compile that fp32 grouped GEMMs would break: cast them first
    out = ranked(out.astype({"est_gain_ns": "float64", "gain_bound_ns": "float64"}))
    for column in (*SITE_KEYS, "kernels"):
        out[column] = blank_to_none(filled(out[column]))
    return out.reset_index(drop=True)


#: What must agree for findings in repeated blocks to fold into one row: the finding and
#: what the codes say of its module and fix (a convolution's and a batch norm's findings
#: never share a row).
FOLD_KEYS = ("variant", "shape", "direction", "op", "finding", "cause", "module_kind",
             "fix_code", "layout", "dim_role", "optimizer")


def fold_findings(found: pd.DataFrame, kernels: pd.DataFrame | None = None) -> pd.DataFrame:
    """One row for a finding repeated in each block of a repeated structure: its gain the
    sum of the blocks' (and so a benchmark's ``before_ns``, ``after_ns`` and
    ``untimed_calls``), its codes and facts those of the block with the largest gain, and
    ``blocks`` how many it stands for (see :mod:`torch_nsight.analyze.fold`).

    Args:
        found: :func:`findings` rows (worded or not: words are render's, from the codes).
        kernels: the kernel table they come from: with it, only blocks that launched the
            same kernels fold (:func:`~torch_nsight.analyze.fold.with_structure`).

    Returns:
        The folded rows, in :func:`ranked` order.
    """
    keys = [k for k in FOLD_KEYS if k in found]
    if kernels is not None and len(found):
        found, keys = with_structure(found, kernels), [*keys, STRUCTURE_COLUMN]
    sums = tuple(c for c in ("est_gain_ns", "gain_bound_ns", "before_ns", "after_ns",
                             "untimed_calls") if c in found)
    found = found.assign(_rank=found["est_gain_ns"].fillna(
        found.get("gain_bound_ns", pd.Series(np.nan, index=found.index))))
    folded = fold_rows(found, keys=keys, sums=sums, rank="_rank")
    folded = folded.drop(columns=[STRUCTURE_COLUMN, "_rank"], errors="ignore")
    return ranked(folded).reset_index(drop=True)


#: A gain under this per run (ns) is below what a step's timer resolves (CUDA events: about
#: 0.5 µs): such findings rank last, after every bound.
TINY_GAIN_NS = 1_000.0


def ranked(found: pd.DataFrame) -> pd.DataFrame:
    """Findings in the order a user acts on them: those with a fix, then those whose cause
    has no known PyTorch-level fix (``fix_code`` ``none_known``); in each, the gains a
    model of the fix counts (``est_gain_ns``), largest first, then the findings with only
    a bound (``gain_bound_ns``: what no fix can beat), largest first; last, the gains under
    :data:`TINY_GAIN_NS`, which recover nothing a step could measure. A bound is not a gain:
    it never ranks above a measurable one, and time no fix recovers never above a fix."""
    if found.empty:
        return found
    no_fix = found["fix_code"].eq("none_known") if "fix_code" in found else False
    bound = found.get("gain_bound_ns", pd.Series(np.nan, index=found.index))
    tiny = found["est_gain_ns"].lt(TINY_GAIN_NS)
    order = found.assign(_no_fix=no_fix, _tiny=tiny, _bound=bound).sort_values(
        ["_tiny", "_no_fix", "est_gain_ns", "_bound"], ascending=[True, True, False, False],
        na_position="last", kind="stable")
    return order.drop(columns=["_no_fix", "_tiny", "_bound"])


__all__ = ["findings", "fold_findings", "ranked", "FOLD_COLUMN", "FOLD_KEYS", "TIMELINE_FACTS"]
