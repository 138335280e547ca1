"""``fp32_no_tensor_cores``: fp32 GEMMs and convolutions on CUDA cores with TF32 off (or
unknown); gain: their time above the TF32 tensor roof reached at
:data:`~.prepare.ATTAINABLE_FRACTION`. Where the step's other GEMMs ran 16-bit and these are
ops autocast does not cast (``_grouped_mm``), the fix is to cast them to that dtype
(``cast_to_half``) and the roof is its tensor peak: torch runs an fp32 grouped GEMM as one
small GEMM per group, which TF32 sped up by 17% at the recorded Mixtral-style experts'
shapes and a bf16 cast by 4.1x (one grouped kernel; H200, ``bench/grouped_mm_precision.py``).

The kernel's precision says so where the FLOP counters were recorded (``fp32`` with no
tensor-core FLOPs); where its FLOPs come from the calls table (the fast set), its tensor pipe
idle (:data:`IDLE_TENSOR_PIPE_PCT`) does; without either (a timeline trace, the duration set),
its name does: CUTLASS's ``simt`` kernels and cuBLAS's ``ffma`` ones run on CUDA cores.
Where the settings were not recorded (``profile`` of a script), a switch is taken as on where
the same step ran kernels of that kind on TF32 tensor cores (Faster R-CNN's cuDNN kernels, in
fp32 with ``cudnn.allow_tf32`` at its default, were told to turn it on).
PyTorch's own kernels (``at::native::``, its NCHW depthwise convolution) are left out: no
TF32 switch reaches them. Launches shorter than a launch takes
(:data:`~torch_nsight.analyze.stalls.LAUNCH_OVERHEAD_NS`) are left out: the launch holds them,
whatever unit does their math.
"""

from __future__ import annotations

import pandas as pd

from torch_nsight.analyze.analytic import TENSOR_PRECISION
from torch_nsight.analyze.classify import IDLE_TENSOR_PIPE_PCT
from torch_nsight.analyze.findings.call_shapes import CallsOf
from torch_nsight.analyze.findings.codes import FixCode
from torch_nsight.analyze.findings.prepare import (
    ATTAINABLE_FRACTION,
    contains,
    full_names,
    per_run,
)
from torch_nsight.analyze.findings.record import Finding
from torch_nsight.analyze.findings.registry import Context, finding_check
from torch_nsight.analyze.roofline import TENSOR_COLUMNS
from torch_nsight.analyze.stalls import LAUNCH_OVERHEAD_NS
from torch_nsight.metrics import PRECISIONS
from torch_nsight.vocabulary import (
    HALF_DTYPES,
    INDUCTOR_DTYPE,
    LABELS,
    SITE_KEYS,
    tf32_enabled,
)

#: fp32 data: half-precision instructions under this share of the fp32 FLOPs (a kernel fed
#: 16-bit operands converts them: 4% in convnet_fwd's fp16 stem, 0.0002% in findings_fp32_off).
HALF_SHARE = 0.01
#: CUDA-core fp32 GEMM kernels by name: CUTLASS's SIMT SGEMMs, cuBLAS's FFMA kernels.
CUDA_CORE_NAMES = ("simt_sgemm", "_ffma_", "sgemm")
#: The GEMM and convolution ops ``torch.autocast`` casts to 16-bit on CUDA (its lower-precision
#: list, ``aten/src/ATen/autocast_mode.cpp``). An fp32 one of these beside 16-bit GEMMs ran
#: with autocast switched off on purpose (Hugging Face's rotary angles); any other GEMM op
#: (``_grouped_mm``) autocast leaves in the dtype it was given.
AUTOCAST_CASTS = frozenset({
    "mm", "bmm", "addmm", "baddbmm", "addbmm", "addmv", "addr", "mv", "matmul", "einsum",
    "linear", "chain_matmul", "linalg_multi_dot", "linalg_vecdot", "prelu", "convolution",
    "_convolution", "conv1d", "conv2d", "conv3d", "conv_tbc", "conv_transpose1d",
    "conv_transpose2d", "conv_transpose3d", "cudnn_convolution", "convolution_backward"})
#: 16-bit data in a kernel's name or template arguments (cuDNN's ``implicit_convolve_sgemm``
#: also runs ``__nv_bfloat16`` convolutions on CUDA cores: no TF32 switch reaches those).
SIXTEEN_BIT = ("tf32", "hmma", "bf16", "f16", "bfloat16", "__half", "half")


def _fp32_data(rows: pd.DataFrame, calls_of: CallsOf) -> bool:
    """Whether the kernels work on fp32 data: their calls' dtype where the calls table has
    them, else hardly any half-precision instructions (16-bit operands need conversions)."""
    mine = calls_of(rows)
    if len(mine):
        return bool((mine["dtype"] == "float32").any())
    # a compiled graph's launch says its operands' dtype; a kernel templated on a 16-bit type
    # (cuDNN's direct convolution of bf16 data) converts it for its FMAs: no TF32 reaches it
    compiled = rows.get(INDUCTOR_DTYPE, pd.Series(dtype=object)).dropna().astype(str)
    if compiled.isin(list(HALF_DTYPES)).any() or contains(rows["kernel_full"], SIXTEEN_BIT).any():
        return False
    return bool(rows["flops_fp16"].fillna(0).sum() <= HALF_SHARE * rows["flops_fp32"].sum())


def _labels(rows: pd.DataFrame) -> tuple[str, ...]:
    return tuple(str(rows[label].iat[0]) for label in LABELS)


def _tf32_seen(work: pd.DataFrame, calls_of: CallsOf) -> set[tuple[tuple[str, ...], bool]]:
    """The (labels, convolution?) where a GEMM or convolution kernel ran on TF32 tensor
    cores: where the settings were not recorded (a ``profile`` of a script), that is what
    says the switch is on (``cudnn.allow_tf32`` is on by default). A convolution's is cuDNN's
    (its kernel, or a cuBLAS GEMM at a site of convolutions alone), a GEMM's cuBLAS's."""
    seen: set[tuple[tuple[str, ...], bool]] = set()
    ran = work[(work["precision"] == "tensor_tf32") & (work["is_gemm"] | work["is_conv"])]
    for _, rows in ran.groupby(list(SITE_KEYS), sort=False, dropna=False):
        conv = bool(rows["is_conv"].any()) or _convolutions_only(rows, calls_of)
        seen.add((_labels(rows), conv))
    return seen


def _convolutions_only(rows: pd.DataFrame, calls_of: CallsOf) -> bool:
    """Whether every GEMM or convolution call recorded where ``rows`` ran is a convolution:
    cuDNN runs some (a 1x1 convolution in NCHW, a weight gradient) as cuBLAS GEMMs, which
    ``cudnn.allow_tf32`` governs, not ``cuda.matmul.allow_tf32``."""
    ops = calls_of(rows)["aten_op"].astype(str)
    return bool(len(ops)) and bool(ops.str.contains("conv", regex=False).all())


def _uncast_ops(rows: pd.DataFrame, calls_of: CallsOf) -> list[str]:
    """The GEMM or convolution ops called on fp32 data where ``rows`` ran that autocast does
    not cast (:data:`AUTOCAST_CASTS`)."""
    mine = calls_of(rows)
    ops = mine.loc[mine["dtype"] == "float32", "aten_op"].astype(str)
    return list(dict.fromkeys(op for op in ops if op not in AUTOCAST_CASTS))


def _half_elsewhere(heavy: pd.DataFrame, rows: pd.DataFrame, uncast: list[str]) -> str | None:
    """The dtype most of the same step's other GEMM and convolution calls (same variant and
    shape) ran in, where it is 16-bit and the fp32 calls here are ops autocast does not cast
    (``uncast``; a grouped GEMM under ``torch.autocast``); None otherwise (a model in fp32,
    one bf16 head in it, or an op autocast casts)."""
    if heavy.empty or not uncast:
        return None
    others = heavy["module_path"].astype(str) != str(rows["module_path"].iat[0])
    for label in ("variant", "shape"):
        if label in heavy and label in rows:
            others &= heavy[label].astype(str) == str(rows[label].iat[0])
    dtypes = heavy.loc[others, "dtype"].astype(str)
    dtypes = dtypes[dtypes != ""]
    most = str(dtypes.mode().iat[0]) if len(dtypes) else None
    return most if most in HALF_DTYPES else None


@finding_check("fp32_no_tensor_cores")
def fp32_no_tensor_cores(context: Context) -> list[Finding]:
    """One finding per site and kind (GEMM or convolution) whose fp32 kernels ran no
    tensor-core FLOPs while its TF32 switch is off or unknown."""
    work = context.work
    tensor = work[list(TENSOR_COLUMNS)].sum(axis=1, min_count=1)
    idle_pipe = pd.to_numeric(work["tensor_pipe_pct"], errors="coerce") < IDLE_TENSOR_PIPE_PCT
    # (from the tensor pipe: kernels given FLOPs by the calls table; cuDNN attention's
    # convert_dq_to_16bits has none, and a kernel with no work has nothing to move)
    counted = (work["precision"] == "fp32") & (
        (tensor == 0) | (tensor.isna() & idle_pipe & (work["flops"] > 0)))
    # no FLOP counters: the CUDA-core kernels by name, fp32 by construction
    by_name = ((work["precision"] == "") & contains(work["kernel"], CUDA_CORE_NAMES)
               & ~contains(work["kernel"], SIXTEEN_BIT)
               & ~contains(work["kernel_full"], SIXTEEN_BIT))
    # a launch shorter than a launch takes is held by its launch: no faster math unit
    # shortens the step (HF's rotary embedding, a 33 kFLOP fp32 GEMM of 4 µs)
    long_enough = work["duration_ns"] >= LAUNCH_OVERHEAD_NS
    # TF32 reaches cuBLAS and cuDNN, not PyTorch's own kernels (its NCHW depthwise
    # convolution, conv_depthwise2d: nchw_kernels' rows)
    native = full_names(work).str.contains("at::native::", regex=False)
    candidates = work[(work["is_gemm"] | work["is_conv"]) & (counted | by_name) & long_enough
                      & ~native]
    found: list[Finding] = []
    seen = _tf32_seen(work, context.calls_of)
    for _, rows in candidates.groupby([*SITE_KEYS, "is_conv"], sort=False):
        conv = bool(rows.iloc[0]["is_conv"]) or _convolutions_only(rows, context.calls_of)
        tf32 = tf32_enabled(context.settings, "conv" if conv else "matmul")
        if tf32 is None and (_labels(rows), conv) in seen:
            continue  # on already: the step's other kernels of this kind ran TF32
        named = bool(by_name[rows.index].all())
        if tf32 or not (named or _fp32_data(rows, context.calls_of)):
            continue
        uncast = _uncast_ops(rows, context.calls_of)
        half = _half_elsewhere(context.heavy, rows, uncast)
        # cast to the step's 16-bit dtype where autocast left the op in fp32, else TF32
        peak = rows[PRECISIONS[TENSOR_PRECISION[half]][1] if half
                    else "peak_tensor_tf32_per_cycle"] * rows["sm_clock_hz"]
        roof_ns = 1e9 * pd.concat([rows["flops"] / peak,
                                   rows["dram_bytes"] / rows["peak_bytes_per_s"]],
                                  axis=1).max(axis=1, skipna=False)
        gain = per_run(rows, (rows["duration_ns"] - roof_ns / ATTAINABLE_FRACTION)
                       .clip(lower=0.0))
        if gain <= 0:
            continue
        site = context.site(rows)
        fix: FixCode = "cast_to_half" if half else "tf32_conv" if conv else "tf32_matmul"
        found.append(Finding(
            "fp32_no_tensor_cores", rows, gain, "roofline", "high" if tf32 is False else "medium",
            fix, module_kind=site.kind, aten_ops=site.ops, layout=site.layout, dtype="float32",
            fix_params={"setting": "cudnn.allow_tf32" if conv else "cuda.matmul.allow_tf32",
                        **({"dtype": half, "ops": uncast} if half else {})},
            facts={"conv": conv, "tf32": tf32, "by_name": named,
                   "kernel": rows.iloc[0]["kernel"], "time_ns": per_run(rows),
                   "flops_per_run": per_run(rows, rows["flops"]),
                   "flops_per_ns": rows["flops"].sum() / rows["duration_ns"].sum(),
                   "peak_flops_per_s": peak.max(), "roof_precision": half or "tf32",
                   "roof_ns": per_run(rows, roof_ns)}))
    return found
