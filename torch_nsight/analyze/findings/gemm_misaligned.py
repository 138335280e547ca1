"""``gemm_misaligned``: a GEMM whose operands are off their dtype's alignment, named by the
op that ran it; gain: its time above its roofline ceiling reached at
:data:`~.prepare.ATTAINABLE_FRACTION`.

What is at fault, and so the fix, depends on the op:

* a Linear's GEMM (``mm``, ``addmm``, ``linear``): its input or output features, the
  dimensions that are the operands' strides (the rows never are, forward or backward), padded
  to :data:`PAD_TO` with a wider ``nn.Linear``;
* another matmul (``bmm``, ``matmul``): the misaligned stride, padded in the operands;
  attention written out (batched matmuls whose stride is a softmax's length at the same
  site): the sequence length, ``scaled_dot_product_attention`` in its place (another
  backend where SDPA ran on its math path, whose softmax is ``_safe_softmax``);
* a convolution that cuBLAS or cuDNN ran with an ``align1``/``align2`` kernel: its channels
  where they are off (padded to a multiple of 8), else the output positions a 1x1
  convolution in NCHW runs its GEMM over (H x W = 49, 196): channels-last;
* from kernel names alone (no call at the site): some dimension, which the calls table would
  name. CUDA-core ``simt`` kernels are aligned to one element by design: not a misalignment
  (``fp32_no_tensor_cores`` names them).
"""

from __future__ import annotations

import re
from typing import Any

import pandas as pd

from torch_nsight.analyze.findings.call_shapes import (
    ALIGNMENT,
    GEMM_OPS,
    ROLES,
    STRIDE_ROLES,
    calls_where,
    forward_roles,
    off_alignment,
    role_of,
)
from torch_nsight.analyze.findings.codes import FixCode, Layout
from torch_nsight.analyze.findings.prepare import (
    contains,
    in_groups_with,
    per_run,
    roof_pct,
    roofline_gain,
)
from torch_nsight.analyze.findings.record import Finding
from torch_nsight.analyze.findings.registry import Context, finding_check
from torch_nsight.analyze.findings.sites import Site, takes_5d
from torch_nsight.vocabulary import JOIN_KEYS

#: A misaligned GEMM dimension is padded up to a multiple of this.
PAD_TO = 64
#: A convolution's channels are padded up to a multiple of this (cuDNN's tensor-core
#: kernels take channels in multiples of 8 for 16-bit data).
CHANNELS_TO = 8
OLD_ARCH_NAMES = ("cutlass_75", "s1688", "sm75")
HOPPER_GPUS = ("H100", "H200", "H800", "GH200")
_SMALL_ALIGN = re.compile(r"align[12](?!\d)")
#: CUDA-core kernels: one-element alignment is how they work, not a misalignment.
SIMT = ("simt",)
_LINEAR_OPS = frozenset({"mm", "addmm", "linear"})
#: Attention written out: its batched matmuls (with a softmax beside, ``Site.softmax_lengths``).
BATCHED_OPS = frozenset({"bmm", "baddbmm"})
#: The dimensions of a batched matmul that are its operands' strides (row-major).
ATTENTION_STRIDES = frozenset({"N", "K"})


def _padded(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


def channel_pads(dims: dict[str, int], align: int) -> list[dict[str, Any]]:
    """A convolution's channels off ``align`` (``in_channels``, ``out_channels`` of
    ``dims``), each with the multiple of :data:`CHANNELS_TO` to pad it to (``pad_channels``'s
    parameters)."""
    return [{"role": role, "value": dims[role], "padded": _padded(dims[role], CHANNELS_TO)}
            for role in ("in_channels", "out_channels") if role in dims and dims[role] % align]


def _from_gemm_calls(group: pd.DataFrame, gemms: pd.DataFrame, known: dict[str, int],
                     site: Site) -> list[Finding]:
    """One site's finding from its GEMM calls' shapes, if a stride is off; ``known``: the
    module's forward dimensions by role (:func:`~.calls.forward_roles`)."""
    rows = group[group["is_gemm"]]
    rows = rows if len(rows) else group[group["precision"].str.startswith("tensor_")]
    tf32 = (rows["precision"] == "tensor_tf32").any()  # fp32 alignment matters only there
    if not known:  # a module without a forward GEMM: each call's own dimensions
        first = gemms["dims"].iloc[0]
        known = {ROLES[d]: v for d, v in first.items()}
    bad = [(c, d, v, _role(c, d, v, known, site.softmax_lengths)) for _, c in gemms.iterrows()
           for d, v in c["bad"] if c["dtype"] != "float32" or tf32]
    bad = [(c, d, v, role) for c, d, v, role in bad if role in STRIDE_ROLES]
    # attention written out: a sequence length is no operand to pad; where something else is
    # off too, that is the finding
    others = [b for b in bad if b[3] != "sequence"]
    by_hand = bool(bad) and not others
    bad = bad if by_hand else others
    gain = roofline_gain(rows) if len(rows) else 0.0
    if not bad or gain <= 0:
        return []
    said = [{"dtype": c["dtype"], "op": c["aten_op"], **c["dims"], "dim": d, "value": v,
             "role": role, "align": ALIGNMENT[c["dtype"]], "padded": _padded(v, PAD_TO)}
            for c, d, v, role in bad]
    call, dim, value, role = bad[0]
    linear = site.kind == "linear" and all(b["op"] in _LINEAR_OPS for b in said)
    pads = list({b["role"]: {"role": b["role"], "value": b["value"], "padded": b["padded"]}
                 for b in said}.values())
    params: dict[str, Any] = {"pads": pads}
    if linear:
        params.update({k: known[k] for k in ("in_features", "out_features") if k in known})
    single = len(gemms) == 1 and rows["kernel"].nunique() == 1
    # SDPA already ran, on its math path (its softmax is _safe_softmax): another backend
    math_path = "_safe_softmax" in site.ops
    code: FixCode = (("sdpa_backend" if math_path else "use_sdpa") if by_hand
                     else "pad_features" if linear else "pad_operands")
    return [Finding("gemm_misaligned", rows, gain, "roofline", "high" if single else "medium",
                    code, module_kind="attention" if by_hand else site.kind,
                    aten_ops=site.ops, shapes=call["shapes"], dim=dim, dim_role=role,
                    dim_value=int(value), layout=site.layout, dtype=call["dtype"],
                    fix_params=params,
                    facts={"bad": said, "kernel": rows.iloc[0]["kernel"],
                           "roof_pct": roof_pct(rows), "time_ns": per_run(rows)})]


def _role(call: pd.Series, dim: str, value: int, known: dict[str, int],
          softmax_lengths: frozenset[int]) -> str:
    """What a misaligned dimension of a GEMM call is: a batched matmul's stride that is the
    length a softmax at the same site normalises over is attention's sequence length (scores
    = q @ k^T, softmax, @ v: a window of 7 x 7 = 49 tokens), which no padding of operands
    fixes cleanly and scaled_dot_product_attention takes as it is (a head dimension is not
    it); else :func:`~.call_shapes.role_of`."""
    if call["aten_op"] in BATCHED_OPS and dim in ATTENTION_STRIDES and value in softmax_lengths:
        return "sequence"
    return role_of(dim, value, known)


def _from_conv(group: pd.DataFrame, evidence: pd.Series, convs: pd.DataFrame,
               known: dict[str, int], site: Site) -> list[Finding]:
    """A convolution's site whose GEMM or convolution kernel is an ``align1``/``align2`` (or
    pre-Hopper) one: its channels where they are off, else the output positions of an NCHW
    1x1 convolution."""
    rows = group[evidence[group.index] & (group["is_gemm"] | group["is_conv"])]
    gain = roofline_gain(rows) if len(rows) else 0.0
    if rows.empty or gain <= 0:
        return []
    shaped = convs[convs["dims"].notna()]
    call = shaped.iloc[0] if len(shaped) else None
    # the dtype of any call there (a backward convolution's calls have no dims)
    dtype = str(convs["dtype"].iat[0]) if len(convs) else None
    shapes = call["shapes"] if call is not None else None
    align = ALIGNMENT.get(dtype or "", 8)
    pads = channel_pads(known, align)
    facts = {"kernel": rows.iloc[0]["kernel"], "roof_pct": roof_pct(rows),
             "time_ns": per_run(rows), "align": align, "dims": dict(known)}
    if pads:
        role, value = pads[0]["role"], pads[0]["value"]
        return [Finding("gemm_misaligned", rows, gain, "roofline", "medium", "pad_channels",
                        module_kind=site.kind, aten_ops=site.ops, shapes=shapes,
                        dim={v: k for k, v in ROLES.items()}[role], dim_role=role,
                        dim_value=int(value), layout=site.layout, dtype=dtype,
                        fix_params={"pads": pads}, facts=facts)]
    # neither the channels nor the positions off (or known), or one position (N x C x 1 x 1,
    # both layouts at once): nothing to name
    if "spatial" not in known or not off_alignment(known["spatial"], align, gemm=True) \
            or site.planar is False:
        return []
    # aligned channels: the GEMM runs over the output positions, which only NCHW does
    layout: Layout = "channels_last" if site.layout == "channels_last" else "nchw"
    return [Finding("gemm_misaligned", rows, gain, "roofline", "medium",
                    "channels_last" if layout == "nchw" else "none_known",
                    module_kind=site.kind, aten_ops=site.ops, shapes=shapes, dim="HxW",
                    dim_role="spatial", dim_value=int(known["spatial"]), layout=layout,
                    dtype=dtype, facts=facts,
                    fix_params={"ndim": 5} if takes_5d(shapes) else {})]


@finding_check("gemm_misaligned")
def gemm_misaligned(context: Context) -> list[Finding]:
    """From the calls table where it has the site's GEMM or convolution calls, else from
    kernel names (``align1``/``align2``, or a pre-Hopper kernel on a Hopper GPU)."""
    work, heavy = context.work, context.heavy
    found: list[Finding] = []
    shaped = heavy[heavy["dims"].notna()]
    gemms_of, heavy_of = calls_where(shaped), calls_where(heavy)
    roles = forward_roles(shaped)
    hopper = work["gpu"].map(lambda g: any(h in str(g) for h in HOPPER_GPUS)).astype(bool)
    old_arch = contains(work["kernel"], OLD_ARCH_NAMES) & hopper
    small_align = work["kernel"].map(lambda k: bool(_SMALL_ALIGN.search(str(k)))).astype(bool)
    named = (old_arch | small_align) & ~contains(work["kernel"], SIMT)
    work = work[in_groups_with(work, JOIN_KEYS, work["is_gemm"] | work["is_conv"] | named
                               | work["precision"].astype(str).str.startswith("tensor_"))]
    for _, group in work.groupby(list(JOIN_KEYS), sort=False):
        site = context.site(group)
        path = str(group["module_path"].iat[0])
        mine = gemms_of(group)
        gemm_calls = mine[mine["aten_op"].isin(GEMM_OPS)]
        convs = heavy_of(group)
        convs = convs[~convs["aten_op"].isin(GEMM_OPS)]
        if len(gemm_calls):
            found += _from_gemm_calls(group, gemm_calls, roles.get(path, {}), site)
        elif site.kind == "conv" or len(convs):
            found += _from_conv(group, named, convs,
                                roles.get(path, {}), site)
        elif not site.recorded:  # no call at this site: the kernel's name is all there is
            found += _from_names(group, named, old_arch, context.has_calls, site)
    return found


def _from_names(group: pd.DataFrame, named: pd.Series, old_arch: pd.Series,
                has_calls: bool, site: Site) -> list[Finding]:
    rows = group[group["is_gemm"] & named[group.index]]
    gain = roofline_gain(rows) if len(rows) else 0.0
    if rows.empty or gain <= 0:  # an unknown gain (no roofline) is still said
        return []
    return [Finding("gemm_misaligned", rows, gain, "roofline", "medium", "pad_gemm_dims",
                    module_kind=site.kind, layout=site.layout,
                    fix_params={"multiple": PAD_TO, "calls_recorded": has_calls},
                    facts={"kernel": rows.iloc[0]["kernel"], "gpu": rows.iloc[0]["gpu"],
                           "old_arch": bool(old_arch[rows.index].any()),
                           "roof_pct": roof_pct(rows), "time_ns": per_run(rows)})]
