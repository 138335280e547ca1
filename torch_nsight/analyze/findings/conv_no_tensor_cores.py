"""``conv_no_tensor_cores``: a 16-bit convolution that cuDNN ran on CUDA cores; gain: its
time above the 16-bit tensor roof reached at :data:`~.prepare.ATTAINABLE_FRACTION`.

cuDNN runs some NCHW convolutions of bf16 or fp16 data with its direct kernels
(``implicit_convolve_sgemm<__nv_bfloat16, ...>``), which convert to fp32 and use FMAs: no
TF32 switch reaches them (``fp32_no_tensor_cores`` covers fp32 data), and the tensor pipe
stays idle (0.44% on ViT-S/16's patch embedding, 417 µs a step in
``bound_calibration/vit_full_sol``). In channels-last layout cuDNN picks its tensor-core
kernels for such convolutions, where the channels are multiples of 8 (an RGB input's 3
channels are padded: ``pad_channels``); a ``Conv3d``'s 5-D tensors go ``channels_last_3d``
(``fix_params["ndim"]`` 5: R3D-18's stem, ``implicit_convolveNd_sgemm``, not measured alone).
A ``Conv1d``'s 3-D tensors have no layout switch and no known fix (``cudnn.benchmark`` recovered 1.07 and 1.42 ms of the
11.70 ms wav2vec2's grouped ``Conv1d`` spends so, two measurements on the GPU): its time
above the tensor roof is a bound (``headroom``), not a gain. A kernel whose measured tensor-pipe use is not idle is left
out, and so is a site without FLOPs (nothing to place on the tensor roof).
"""

from __future__ import annotations

import pandas as pd

from torch_nsight.analyze.analytic import DIRECT_CONVOLUTION
from torch_nsight.analyze.classify import IDLE_TENSOR_PIPE_PCT
from torch_nsight.analyze.findings.call_shapes import ROLES
from torch_nsight.analyze.findings.codes import FixCode
from torch_nsight.analyze.findings.gemm_misaligned import CHANNELS_TO, channel_pads
from torch_nsight.analyze.findings.prepare import ATTAINABLE_FRACTION, per_run
from torch_nsight.analyze.findings.record import HEADROOM, NAN, Finding
from torch_nsight.analyze.findings.registry import Context, finding_check
from torch_nsight.analyze.findings.sites import layout_params
from torch_nsight.vocabulary import SITE_KEYS

#: The 16-bit data type in a kernel's template arguments, and the tensor peak it would use.
SIXTEEN_BIT = {"__nv_bfloat16": ("bfloat16", "peak_tensor_bf16_per_cycle"),
               "__half": ("float16", "peak_tensor_fp16_per_cycle")}


def _sixteen_bit(kernel_full: object) -> tuple[str, str] | None:
    """The dtype and tensor-peak column of a kernel whose template arguments are 16-bit."""
    text = str(kernel_full)
    for marker, found in SIXTEEN_BIT.items():
        if marker in text:
            return found
    return None


@finding_check("conv_no_tensor_cores")
def conv_no_tensor_cores(context: Context) -> list[Finding]:
    """One finding per site whose 16-bit convolutions ran on cuDNN's CUDA-core kernels."""
    work = context.work
    direct = work["kernel"].astype(str).str.contains(DIRECT_CONVOLUTION) & work["is_conv"]
    idle = work["tensor_pipe_pct"].isna() | (work["tensor_pipe_pct"] < IDLE_TENSOR_PIPE_PCT)
    dtypes = work["kernel_full"].map(_sixteen_bit)
    candidates = work[direct & idle & dtypes.notna() & work["flops"].notna()]
    found: list[Finding] = []
    for _, rows in candidates.groupby(list(SITE_KEYS), sort=False):
        dtype, peak_column = dtypes[rows.index[0]]
        peak = rows[peak_column] * rows["sm_clock_hz"]
        roof_ns = 1e9 * pd.concat([rows["flops"] / peak,
                                   rows["dram_bytes"] / rows["peak_bytes_per_s"]],
                                  axis=1).max(axis=1, skipna=False)
        gain = per_run(rows, (rows["duration_ns"] - roof_ns / ATTAINABLE_FRACTION)
                       .clip(lower=0.0))
        if not gain > 0:
            continue
        site = context.site(rows)
        calls = context.calls_of(rows)
        # channels-last lays out 4-D tensors, channels_last_3d a Conv3d's 5-D ones: a Conv1d
        # has no such switch
        volume = {} if calls.empty else layout_params(calls["shapes"])
        planar = volume is not None
        dims = next((d for d in calls["dims"] if isinstance(d, dict)), None) \
            if "dims" in calls else None
        # cuDNN's tensor-core kernels take 16-bit channels in multiples of 8 (an RGB
        # input's 3 is not): pad them, and go channels-last
        pads = channel_pads({ROLES[k]: v for k, v in dims.items()}, CHANNELS_TO) \
            if dims else []
        fix: FixCode = ("pad_channels" if pads else "channels_last") if planar else "none_known"
        found.append(Finding(
            # no layout switch for a Conv1d or Conv3d, so no model of a fix's gain: the
            # time above the tensor roof is the most any fix could recover
            "conv_no_tensor_cores", rows, gain if planar else NAN,
            "roofline" if planar else HEADROOM, "medium" if planar else "low", fix,
            module_kind="conv", bound_ns=NAN if planar else gain,
            aten_ops=site.ops, shapes=calls["shapes"].iloc[0] if len(calls) else None,
            layout="nchw" if planar else site.layout, dtype=dtype,
            fix_params={**({"pads": pads} if pads else {}), **(volume or {})},
            facts={"kernel": rows.iloc[0]["kernel"], "time_ns": per_run(rows),
                   "tensor_pipe_pct": float(rows["tensor_pipe_pct"].max()),
                   "flops_per_run": per_run(rows, rows["flops"]),
                   "peak_flops_per_s": float(peak.max()),
                   "tensor_roof_ns": per_run(rows, roof_ns)}))
    return found
