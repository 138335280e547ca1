"""``fp32_no_tensor_cores``: fp32 GEMMs and convolutions on CUDA cores with TF32 off (or
unknown); gain: their time above the TF32 tensor roof reached at
:data:`~.prepare.ATTAINABLE_FRACTION`."""

from __future__ import annotations

import pandas as pd

import torch_nsight.analyze.findings.wording as wording
from torch_nsight.analyze.findings.calls import CallsOf
from torch_nsight.analyze.findings.prepare import ATTAINABLE_FRACTION, per_run
from torch_nsight.analyze.findings.registry import Context, Found, finding_check
from torch_nsight.analyze.roofline import TENSOR_COLUMNS
from torch_nsight.vocabulary import SITE_KEYS, tf32_enabled

#: fp32 data: half-precision instructions under this share of the fp32 FLOPs (a kernel fed
#: 16-bit operands converts them: 4% in convnet_fwd's fp16 stem, 0.0002% in findings_fp32_off).
HALF_SHARE = 0.01


def _fp32_data(rows: pd.DataFrame, calls_of: CallsOf) -> bool:
    """Whether the kernels work on fp32 data: their calls' dtype where the calls table has
    them, else hardly any half-precision instructions (16-bit operands need conversions)."""
    mine = calls_of(rows)
    if len(mine):
        return bool((mine["dtype"] == "float32").any())
    return bool(rows["flops_fp16"].fillna(0).sum() <= HALF_SHARE * rows["flops_fp32"].sum())


@finding_check("fp32_no_tensor_cores", says=wording.fp32_no_tensor_cores)
def fp32_no_tensor_cores(context: Context) -> list[Found]:
    """One finding per site and kind (GEMM or convolution) whose fp32 kernels ran no
    tensor-core FLOPs while its TF32 switch is off or unknown."""
    work = context.work
    tensor = work[list(TENSOR_COLUMNS)].sum(axis=1, min_count=1)
    candidates = work[(work["is_gemm"] | work["is_conv"]) & (work["precision"] == "fp32")
                      & (tensor == 0)]
    found: list[Found] = []
    for _, rows in candidates.groupby([*SITE_KEYS, "is_conv"], sort=False):
        conv = bool(rows.iloc[0]["is_conv"])
        tf32 = tf32_enabled(context.settings, "conv" if conv else "matmul")
        if tf32 or not _fp32_data(rows, context.calls_of):
            continue
        peak = rows["peak_tensor_tf32_per_cycle"] * rows["sm_clock_hz"]
        tf32_ns = 1e9 * pd.concat([rows["flops"] / peak,
                                   rows["dram_bytes"] / rows["peak_bytes_per_s"]],
                                  axis=1).max(axis=1, skipna=False)
        gain = per_run(rows, (rows["duration_ns"] - tf32_ns / ATTAINABLE_FRACTION)
                       .clip(lower=0.0))
        if gain <= 0:
            continue
        found.append(Found(rows, gain, "roofline", "high" if tf32 is False else "medium",
                           {"conv": conv, "tf32": tf32,
                            "flops_per_run": per_run(rows, rows["flops"]),
                            "flops_per_ns": rows["flops"].sum() / rows["duration_ns"].sum(),
                            "peak_flops_per_s": peak.max(),
                            "tf32_roof_ns": per_run(rows, tf32_ns)}))
    return found
