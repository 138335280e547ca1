"""``gemm_misaligned``: 16-bit (or TF32) GEMMs with a dimension off alignment; gain: their
time above their roofline ceiling reached at :data:`~.prepare.ATTAINABLE_FRACTION`."""

from __future__ import annotations

import re

import pandas as pd

import torch_nsight.analyze.findings.wording as wording
from torch_nsight.analyze.findings.calls import (
    ALIGNMENT,
    ROLES,
    calls_where,
    forward_roles,
    role_of,
)
from torch_nsight.analyze.findings.prepare import (
    contains,
    in_groups_with,
    per_run,
    roof_pct,
    roofline_gain,
)
from torch_nsight.analyze.findings.registry import Context, Found, finding_check
from torch_nsight.vocabulary import JOIN_KEYS

#: A misaligned dimension is padded up to a multiple of this.
PAD_TO = 64
OLD_ARCH_NAMES = ("cutlass_75", "s1688", "sm75")
HOPPER_GPUS = ("H100", "H200", "H800", "GH200")
_SMALL_ALIGN = re.compile(r"align[12](?!\d)")


def _from_calls(group: pd.DataFrame, gemms: pd.DataFrame, known: dict[str, int]) -> list[Found]:
    """One module's finding from its GEMM calls' shapes, if a dimension is off; ``known``:
    the module's forward dimensions by role (:func:`~.calls.forward_roles`)."""
    rows = group[group["is_gemm"]]
    rows = rows if len(rows) else group[group["precision"].str.startswith("tensor_")]
    tf32 = (rows["precision"] == "tensor_tf32").any()  # fp32 alignment matters only there
    bad = [(c, d, v) for _, c in gemms.iterrows() for d, v in c["bad"]
           if c["dtype"] != "float32" or tf32]
    gain = roofline_gain(rows) if len(rows) else 0.0
    if not bad or gain <= 0:
        return []
    if not known:  # a module without a forward GEMM: each call's own dimensions
        known = {ROLES[d]: v for d, v in bad[0][0]["dims"].items()}
    said = [{"dtype": c["dtype"], "op": c["aten_op"], **c["dims"], "dim": d, "value": v,
             "role": role_of(d, v, known), "align": ALIGNMENT[c["dtype"]],
             "padded": -(-v // PAD_TO) * PAD_TO} for c, d, v in bad]
    single = len(gemms) == 1 and rows["kernel"].nunique() == 1
    return [Found(rows, gain, "roofline", "high" if single else "medium",
                  {"bad": said, "known": known, "kernel": rows.iloc[0]["kernel"],
                   "roof_pct": roof_pct(rows), "time_ns": per_run(rows)})]


@finding_check("gemm_misaligned", says=wording.gemm_misaligned)
def gemm_misaligned(context: Context) -> list[Found]:
    """From the calls table where it has the module's GEMMs, else from kernel names
    (``align1``/``align2``, or a pre-Hopper kernel on a Hopper GPU)."""
    work, heavy = context.work, context.heavy
    found: list[Found] = []
    gemms_of = calls_where(heavy[heavy["dims"].notna()])
    roles = forward_roles(heavy[heavy["dims"].notna()])
    work = work[in_groups_with(work, JOIN_KEYS, work["is_gemm"] | work["precision"]
                               .astype(str).str.startswith("tensor_"))]
    hopper = work["gpu"].map(lambda g: any(h in str(g) for h in HOPPER_GPUS)).astype(bool)
    old_arch = contains(work["kernel"], OLD_ARCH_NAMES) & hopper
    small_align = work["kernel"].map(lambda k: bool(_SMALL_ALIGN.search(str(k)))).astype(bool)
    for _, group in work.groupby(list(JOIN_KEYS), sort=False):
        mine = gemms_of(group)
        if len(mine):
            found += _from_calls(group, mine, roles.get(str(group["module_path"].iat[0]), {}))
            continue
        old, small = old_arch[group.index], small_align[group.index]
        rows = group[group["is_gemm"] & (old | small)]
        gain = roofline_gain(rows) if len(rows) else 0.0
        if rows.empty or gain <= 0:  # an unknown gain (no roofline) is still said
            continue
        found.append(Found(rows, gain, "roofline", "medium",
                           {"kernel": rows.iloc[0]["kernel"], "gpu": rows.iloc[0]["gpu"],
                            "old_arch": bool(old[rows.index].any()),
                            "roof_pct": roof_pct(rows), "time_ns": per_run(rows)}))
    return found
