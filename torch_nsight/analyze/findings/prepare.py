"""The kernel table every check reads, prepared once, and the sums the checks share.

:func:`prepare` keeps the kernel rows (no copies or memsets), blanks missing keys to ``""``,
reads numbers as floats and adds each row's ``runs``, whether it is a GEMM or a
convolution (by name), whether torch.compile generated it (Inductor's ``triton_`` kernels)
and whether an optimizer's step launched it::

    variant shape module_path direction op source run kernel ... duration_ns ... runs is_gemm is_conv is_compiled is_optimizer
    eager   s128  lm_head     fwd       ""  r.ncu-rep 0 nvjet_... ... 1.2e6      ... 1.0  True    False   False       False
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

import pandas as pd

from torch_nsight.analyze.frames import keyed, runs_per_group
from torch_nsight.analyze.limiter import LIMITER_INPUTS
from torch_nsight.analyze.roofline import TENSOR_COLUMNS
from torch_nsight.naming import OPTIMIZER_DIRECTION
from torch_nsight.vocabulary import LABELS, OUTSIDE_PREFIX, SITE_KEYS

#: Share of its roofline ceiling a well-chosen tensor-core GEMM reaches: the recorded fixes
#: reached 82% (bf16, findings_gemm n50304) and 90% (TF32, findings_fp32_on).
ATTAINABLE_FRACTION = 0.8
GEMM_NAMES = ("gemm", "nvjet", "cutlass", "xmma")
CONV_NAMES = ("conv", "fprop", "dgrad", "wgrad")
#: cuDNN's attention kernels (``..._sdpa_sm90_flash_fprop_...``) say ``fprop`` too.
ATTENTION_NAMES = ("sdpa", "fmha", "flash_attn", "flash_fwd", "flash_bwd", "attention")
_NUMERIC = ("duration_ns", "roof_time_ns", "headroom_ns", "dram_bytes", "flops", "flops_fp32",
            "flops_fp16", "waves", "sm_clock_hz", "peak_tensor_tf32_per_cycle", "peak_bytes_per_s",
            "peak_tensor_bf16_per_cycle", "peak_tensor_fp16_per_cycle", "tensor_pipe_pct",
            *TENSOR_COLUMNS)
_TEXT = ("kernel", "kernel_full", "aten_ops", "precision", "bound", "roofline_side", "gpu",
         "peak_basis", "roof_basis", "limiter", "ncu_rules", "sol_bottleneck", "basis")


#: Multi-tensor functors of the training loop's own calls, never of an optimizer's update:
#: ``torch._foreach_norm`` (``clip_grad_norm_``'s norms) and ``_foreach_mul_`` by a tensor
#: (its scaling by the clip coefficient), as wav2vec2's recorded step runs them outside
#: any range (``zoo_families/wav2vec2``).
NOT_A_STEP = ("LpNormFunctor", "BinaryOpScalarTensorFunctor")


def contains(names: pd.Series, parts: tuple[str, ...]) -> pd.Series:
    """Whether each name contains one of ``parts`` (case-insensitive)."""
    pattern = "|".join(re.escape(part.lower()) for part in parts)
    return names.astype(str).str.lower().str.contains(pattern, regex=True)


def full_names(rows: pd.DataFrame) -> pd.Series:
    """Each kernel's full (demangled) name, its short name where the full one is missing:
    the functor words the checks read (``batch_norm_``, ``copy_kernel``...)."""
    return rows.get("kernel_full", rows["kernel"]).fillna(rows["kernel"]).astype(str)


def prepare(kernels: pd.DataFrame) -> pd.DataFrame:
    """Kernel rows (no copies or memsets) with blank keys ``""``, numbers as floats and each
    row's ``runs``: the number of (source, run) pairs of its (variant, shape)."""
    kernels = kernels.reset_index(drop=True)
    launch = [c for c in LIMITER_INPUTS if c in kernels and c not in (*_TEXT, *_NUMERIC)]
    work = keyed(kernels, [*SITE_KEYS, "source", "run", *_TEXT], [*_NUMERIC, *launch])
    if "kind" in kernels:
        work = work[kernels["kind"].isna() | (kernels["kind"] == "kernel")]
    for column in _NUMERIC:
        work[column] = pd.to_numeric(work[column], errors="coerce").astype("float64")
    work = work.join(runs_per_group(kernels, LABELS).astype({c: object for c in LABELS})
                     .set_index(list(LABELS)), on=list(LABELS))
    work["runs"] = work["runs"].astype("float64")
    attention = contains(work["kernel"], ATTENTION_NAMES)
    work["is_gemm"] = contains(work["kernel"], GEMM_NAMES) & ~contains(work["kernel"],
                                                                       CONV_NAMES)
    work["is_conv"] = contains(work["kernel"], CONV_NAMES) & ~attention
    # Inductor's own kernels: torch.compile has fused these already
    work["is_compiled"] = work["kernel"].astype(str).str.startswith("triton_")
    # an optimizer's step: its range, or its multi-tensor kernels outside one; never a call
    # of the loop's own that runs beside it (clipping, GradScaler: an "(outside)" row)
    outside = work["module"].astype(str).str.startswith(OUTSIDE_PREFIX)
    # outside a step range, the training loop's own multi-tensor kernels are not a step:
    # clip_grad_norm_'s norms and its scaling by the clip coefficient (a tensor)
    loop_own = contains(work["kernel_full"], NOT_A_STEP)
    work["is_optimizer"] = ((work["direction"] == OPTIMIZER_DIRECTION)
                            | (contains(work["kernel"], ("multi_tensor_apply",)) & ~loop_own)
                            ) & ~outside
    return work


def in_groups_with(work: pd.DataFrame, keys: Sequence[str], mask: pd.Series) -> pd.Series:
    """Whether each row's group of ``keys`` holds a row where ``mask`` is true: the groups a
    check can skip, left out before it loops over the rest."""
    return mask.groupby([work[k] for k in keys], sort=False).transform("any").astype(bool)


def per_run(rows: pd.DataFrame, values: pd.Series | None = None) -> float:
    """Sum of ``values`` (default ``duration_ns``) over ``rows``, per run; NaN if any is."""
    values = rows["duration_ns"] if values is None else values
    return float((values / rows["runs"]).sum(min_count=1)) if values.notna().all() else math.nan


def roofline_gain(rows: pd.DataFrame) -> float:
    """Per run: each kernel's time above its roofline ceiling reached at
    :data:`ATTAINABLE_FRACTION` (at least 0 per kernel)."""
    gain = (rows["duration_ns"] - rows["roof_time_ns"] / ATTAINABLE_FRACTION).clip(lower=0.0)
    return per_run(rows, gain)


def roof_pct(rows: pd.DataFrame) -> float:
    """The rows' roofline time as a percentage of their time (NaN where it is not known)."""
    return 100.0 * rows["roof_time_ns"].sum(min_count=1) / rows["duration_ns"].sum()
