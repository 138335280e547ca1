"""``elementwise_chain``: at least :data:`CHAIN_LENGTH` memory-bound elementwise kernels in a
row in one module; gain: their time minus one fused pass over their data."""

from __future__ import annotations

from typing import Any

import pandas as pd

import torch_nsight.analyze.findings.wording as wording
from torch_nsight.analyze.findings.prepare import contains, per_run
from torch_nsight.analyze.findings.registry import Context, Found, finding_check
from torch_nsight.analyze.roofline import TENSOR_COLUMNS
from torch_nsight.naming import OPTIMIZER_DIRECTION
from torch_nsight.vocabulary import LABELS, SITE_KEYS

#: This many qualifying kernels in a row, in one module.
CHAIN_LENGTH = 3
#: What a chain computes, from the functors in its kernels' full names (``rsqrt_kernel_cuda``,
#: ``MeanOps``, ``sin_kernel_cuda``...) and its aten ops: the first kind whose every group
#: of words has one present names the fix.
CHAIN_KINDS: tuple[tuple[str, tuple[tuple[str, ...], ...]], ...] = (
    # a loss first: its log-softmax is no attention's softmax
    ("loss", (("nll_loss", "cross_entropy", "log_softmax"),)),
    # attention advice only where attention's batched matmuls ran
    ("softmax", (("softmax", "masked_fill", "where_kernel", "exp_kernel"),
                 ("bmm", "baddbmm", "einsum"))),
    ("layer_norm", (("rsqrt", "sqrt"), ("meanops", "mean", "var"), ("sub",))),
    ("rms_norm", (("rsqrt",), ("meanops", "mean"))),
    ("gelu", (("tanh",),)),
    ("rotary", (("sin_kernel", "cos_kernel", "sin,", "cos,", "neg"),)),
)


def _chains(work: pd.DataFrame) -> list[pd.DataFrame]:
    """Runs of at least :data:`CHAIN_LENGTH` qualifying kernels in a row (launch order) in
    one module, direction and op, per (source, run, variant, shape)."""
    named = contains(work["kernel"], ("elementwise",)) & (work["roofline_side"] != "compute")
    tensor = work[list(TENSOR_COLUMNS)].sum(axis=1).fillna(0.0)
    plain = ((work["bound"] == "memory") & (work["roofline_side"] != "compute")
             & (tensor == 0) & ~work["is_gemm"] & ~work["is_conv"])
    ok = named | plain
    chains = []
    for _, sequence in work.groupby(["source", "run", *LABELS], sort=False):
        place = (sequence["module_path"].astype(str) + "|" + sequence["direction"].astype(str)
                 + "|" + sequence["op"].astype(str))
        qualified = ok[sequence.index]
        block = ((place != place.shift()) | (qualified != qualified.shift())).cumsum()
        for _, rows in sequence.groupby(block, sort=False):
            if qualified[rows.index].all() and len(rows) >= CHAIN_LENGTH:
                chains.append(rows)
    return chains


def chain_kind(rows: pd.DataFrame) -> str | None:
    """What an elementwise chain computes (:data:`CHAIN_KINDS`), None when not known.

    Args:
        rows: the kernels of the chain's module, direction and op (its reductions too: an
            RMSNorm's mean is a reduce kernel between its elementwise ones)."""
    words = " ".join([*rows.get("kernel_full", pd.Series(dtype=object)).dropna().astype(str),
                      *rows.get("aten_ops", pd.Series(dtype=object)).dropna().astype(str)])
    words = words.lower()
    if "direction" in rows and (rows["direction"] == OPTIMIZER_DIRECTION).any():
        return "optimizer"  # an optimizer's step: its own fused implementation
    for kind, groups in CHAIN_KINDS:
        if all(any(w in words for w in group) for group in groups):
            return kind
    return None


@finding_check("elementwise_chain", says=wording.elementwise_chain)
def elementwise_chain(context: Context) -> list[Found]:
    """Gain per chain: its time minus one pass over its data at the chain's own achieved
    bandwidth; one pass = the DRAM bytes of the chain's largest kernel (a fused kernel reads
    the activation once and writes it once; a chain with a reduction also has kernels on
    the small reduced tensor, whose bytes say nothing of the pass). The fix is the fused op
    for what the chain computes (:func:`chain_kind`)."""
    work = context.work
    chains = [c for c in _chains(work) if c["dram_bytes"].notna().all()
              and c["dram_bytes"].sum() > 0]
    grouped: dict[tuple[Any, ...], list[pd.DataFrame]] = {}
    for chain in chains:
        grouped.setdefault(tuple(chain.iloc[0][list(SITE_KEYS)]), []).append(chain)
    found: list[Found] = []
    sites = work.groupby(list(SITE_KEYS), sort=False).indices if grouped else {}
    for key, parts in grouped.items():
        rows = pd.concat(parts)
        saved = pd.Series([c["duration_ns"].sum() * (1 - c["dram_bytes"].max()
                                                     / c["dram_bytes"].sum())
                           / c["runs"].iloc[0] for c in parts])
        found.append(Found(rows, float(saved.sum()), "roofline", "medium", {
            "kernels_per_run": len(rows) / rows["runs"].iloc[0],
            "kind": chain_kind(work.iloc[sites[key]]), "time_ns": per_run(rows),
            "traffic_bytes": per_run(rows, rows["dram_bytes"]),
            "one_pass_bytes": max(c["dram_bytes"].max() for c in parts)}))
    return found
