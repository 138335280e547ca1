"""Findings: the few fixes worth making, each with the time per run it may recover.

Five checks read the analyzed kernel table (and the calls table, the PyTorch settings and a
timeline where the profile has them): ``gemm_misaligned``, ``fp32_no_tensor_cores``,
``elementwise_chain``, ``layout_conversion`` and ``small_grid``; a timeline adds the rows of
:func:`~torch_nsight.analyze.timeline_analysis.timeline_findings`. A kernel claimed by one of the
first four is not reported again as ``small_grid``; Nsight Compute's own rules, where the
report has their sections, add ``ncu_<rule>`` rows (:mod:`torch_nsight.analyze.rules`).
Rules, thresholds and gain formulas, with
the gains checked against recorded fixes, are in ``docs/findings.md``.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pandas as pd

from torch_nsight.analyze.columns import needs
from torch_nsight.analyze.fold import FOLD_COLUMN, fold_rows
from torch_nsight.analyze.frames import blank_to_none, filled, keyed, runs_per_group
from torch_nsight.analyze.roofline import TENSOR_COLUMNS
from torch_nsight.analyze.rules import rule_findings
from torch_nsight.analyze.timeline_analysis import timeline_findings
from torch_nsight.units import format_bytes, format_duration_ms
from torch_nsight.vocabulary import FINDING_COLUMNS, JOIN_KEYS, LABELS, SITE_KEYS, tf32_enabled

#: Share of its roofline ceiling a well-chosen tensor-core GEMM reaches: the recorded fixes
#: reached 82% (bf16, findings_gemm n50304) and 90% (TF32, findings_fp32_on).
ATTAINABLE_FRACTION = 0.8
#: Tensor-core GEMM dimensions should be multiples of this many elements, per input dtype.
ALIGNMENT = {"bfloat16": 8, "float16": 8, "float32": 4}
#: A misaligned dimension is padded up to a multiple of this.
PAD_TO = 64
#: elementwise_chain: this many qualifying kernels in a row, in one module.
CHAIN_LENGTH = 3
#: fp32 data: half-precision instructions under this share of the fp32 FLOPs (a kernel fed
#: 16-bit operands converts them: 4% in convnet_fwd's fp16 stem, 0.0002% in findings_fp32_off).
HALF_SHARE = 0.01
#: small_grid: a kernel site holding at least this share (%) of its label's time.
SMALL_GRID_PCT = 5.0
GEMM_OPS = frozenset({"mm", "addmm", "bmm", "baddbmm", "linear", "matmul"})
GEMM_NAMES = ("gemm", "nvjet", "cutlass", "xmma")
CONV_NAMES = ("conv", "fprop", "dgrad", "wgrad")
LAYOUT_NAMES = ("nchwToNhwc", "nhwcToNchw")
OLD_ARCH_NAMES = ("cutlass_75", "s1688", "sm75")
HOPPER_GPUS = ("H100", "H200", "H800", "GH200")
_SMALL_ALIGN = re.compile(r"align[12](?!\d)")
_NUMERIC = ("duration_ns", "roof_time_ns", "headroom_ns", "dram_bytes", "flops", "flops_fp32",
            "flops_fp16", "waves", "sm_clock_hz", "peak_tensor_tf32_per_cycle", "peak_bytes_per_s",
            *TENSOR_COLUMNS)
_TEXT = ("kernel", "kernel_full", "aten_ops", "precision", "bound", "reason", "roofline_side",
         "gpu", "peak_basis", "roof_basis")
FIX = {
    "fp32_matmul": "Turn on TF32 tensor cores with torch.backends.cuda.matmul.allow_tf32 = True "
                   "/ torch.set_float32_matmul_precision('high'), or run the model in bf16 "
                   "(torch.autocast('cuda', dtype=torch.bfloat16)).",
    "fp32_conv": "Turn on TF32 tensor cores with torch.backends.cudnn.allow_tf32 = True, or run "
                 "the model in bf16 (torch.autocast('cuda', dtype=torch.bfloat16)).",
    "elementwise_chain": "Fuse them: torch.compile the module (one kernel for the chain).",
    "chain_rms_norm": "Use one fused RMSNorm: torch.nn.functional.rms_norm(x, (d,), weight, "
                      "eps) or nn.RMSNorm (torch >= 2.4) instead of pow/mean/rsqrt/mul, or "
                      "torch.compile the module.",
    "chain_layer_norm": "Use torch.nn.functional.layer_norm / nn.LayerNorm (one fused kernel) "
                        "instead of the mean/var arithmetic, or torch.compile the module.",
    "chain_rotary": "Apply the rotary embedding in one kernel: torch.compile the function "
                    "that applies it (and compute cos/sin once per sequence length, not per "
                    "layer), or a fused RoPE kernel (e.g. flash-attn's apply_rotary_emb).",
    "chain_gelu": "Use F.gelu(approximate='tanh') (nn.GELU(approximate='tanh')): one kernel "
                  "instead of the tanh formula's chain; or torch.compile the module.",
    "chain_loss": "Fuse the loss: torch.compile the function that computes it from the "
                  "logits (the upcast, log-softmax and NLL become a few kernels), or compute "
                  "it over chunks of the logits.",
    "chain_softmax": "Use F.scaled_dot_product_attention (masking, scaling and softmax fused "
                     "into attention), or at least F.softmax over the masked scores; or "
                     "torch.compile the module.",
    "layout_conversion": "Go channels-last: model.to(memory_format=torch.channels_last) and "
                         "channels-last inputs (x.to(memory_format=torch.channels_last)).",
    "small_grid": "Give it more parallel work: a larger batch, fuse it with its neighbours "
                  "(torch.compile), or CUDA graphs (torch.compile(mode='reduce-overhead')).",
    "gemm_by_name": "Pad the GEMM's dimensions (features, vocabulary, sequence) to multiples "
                    "of 64 (a Linear's output features: a wider nn.Linear and slice the "
                    "output); record the calls table (sweep, or instrument(record_calls=...)) "
                    "to name the dimension.",
}
Found = list[tuple[dict[str, Any], pd.Index]]


# --- text ----------------------------------------------------------------------------------
#: A duration in ns as the evidence sentences write it: ``1.23 ms``, ``845.3 µs``, ``n/a``.
_time = functools.partial(format_duration_ms, precision=2)


def _contains(names: pd.Series, parts: tuple[str, ...]) -> pd.Series:
    """Whether each name contains one of ``parts`` (case-insensitive)."""
    pattern = "|".join(re.escape(part.lower()) for part in parts)
    return names.astype(str).str.lower().str.contains(pattern, regex=True)


# --- the table the checks read ---------------------------------------------------------------
def _prepare(kernels: pd.DataFrame) -> pd.DataFrame:
    """Kernel rows (no copies or memsets) with blank keys ``""``, numbers as floats and each
    row's ``runs``: the number of (source, run) pairs of its (variant, shape)."""
    kernels = kernels.reset_index(drop=True)
    work = keyed(kernels, [*SITE_KEYS, "source", "run", *_TEXT], _NUMERIC)
    if "kind" in kernels:
        work = work[kernels["kind"].isna() | (kernels["kind"] == "kernel")]
    for column in _NUMERIC:
        work[column] = pd.to_numeric(work[column], errors="coerce").astype("float64")
    work = work.join(runs_per_group(kernels, LABELS).astype({c: object for c in LABELS})
                     .set_index(list(LABELS)), on=list(LABELS))
    work["runs"] = work["runs"].astype("float64")
    work["is_gemm"] = _contains(work["kernel"], GEMM_NAMES) & ~_contains(work["kernel"],
                                                                         CONV_NAMES)
    work["is_conv"] = _contains(work["kernel"], CONV_NAMES)
    return work


def _in_groups_with(work: pd.DataFrame, keys: Sequence[str], mask: pd.Series) -> pd.Series:
    """Whether each row's group of ``keys`` holds a row where ``mask`` is true: the groups a
    check can skip, left out before it loops over the rest."""
    return mask.groupby([work[k] for k in keys], sort=False).transform("any").astype(bool)


def _per_run(rows: pd.DataFrame, values: pd.Series | None = None) -> float:
    """Sum of ``values`` (default ``duration_ns``) over ``rows``, per run; NaN if any is."""
    values = rows["duration_ns"] if values is None else values
    return float((values / rows["runs"]).sum(min_count=1)) if values.notna().all() else math.nan


def _row(rows: pd.DataFrame, finding: str, evidence: str, fix: str, gain: float, basis: str,
         confidence: str) -> dict[str, Any]:
    first = rows.iloc[0]
    if basis == "roofline":  # say where a weaker ceiling stands in
        if (rows["roof_basis"] == "compute").any():
            basis = "compute roof"
        if (rows["peak_basis"] == "table").any():
            basis += ", known-GPU peaks"
    return {**{k: first[k] for k in SITE_KEYS}, "kernels": "; ".join(dict.fromkeys(rows["kernel"])), "finding": finding,
            "evidence": evidence, "fix": fix, "est_gain_ns": gain, "gain_basis": basis,
            "confidence": confidence}


def _roofline_gain(rows: pd.DataFrame) -> float:
    """Per run: each kernel's time above its roofline ceiling reached at
    :data:`ATTAINABLE_FRACTION` (at least 0 per kernel)."""
    gain = (rows["duration_ns"] - rows["roof_time_ns"] / ATTAINABLE_FRACTION).clip(lower=0.0)
    return _per_run(rows, gain)


def _roof_pct(rows: pd.DataFrame) -> float:
    return 100.0 * rows["roof_time_ns"].sum(min_count=1) / rows["duration_ns"].sum()


def _at_roof(rows: pd.DataFrame) -> str:
    """`` at 12% of its roofline`` (nothing where the roofline is not known: no ``nan``)."""
    pct = _roof_pct(rows)
    return "" if pct != pct else f" at {pct:.0f}% of its roofline"


# --- the calls table ------------------------------------------------------------------------
def gemm_dims(op: str, shapes: Any) -> tuple[int, int, int] | None:
    """(M, N, K) of a GEMM call from its input shapes; None when they do not say."""
    try:
        shapes = [tuple(int(d) for d in s) for s in shapes if s is not None]
        a, b = shapes[1:3] if op in ("addmm", "baddbmm") else shapes[:2]
        if op == "linear":
            return math.prod(a[:-1]), b[0], a[-1]
        return (a[-2], b[-1], a[-1]) if len(a) >= 2 and len(b) >= 2 else None
    except (TypeError, ValueError, IndexError):
        return None


def _heavy_calls(calls: pd.DataFrame | None) -> pd.DataFrame:
    """The GEMM and convolution calls: join keys, ``aten_op``, ``dtype`` (of the last input;
    of the first for a convolution), ``dims`` (M, N, K by name, None for a convolution) and
    ``bad`` (the dimensions off their dtype's alignment)."""
    columns = [*JOIN_KEYS, "aten_op", "dtype", "dims", "bad"]
    if calls is None or "aten_op" not in calls or "input_dtypes" not in calls:
        return pd.DataFrame(columns=columns)
    rows = []
    ops = calls["aten_op"].astype(str)
    chosen = calls[ops.isin(GEMM_OPS) | ops.str.contains("conv", regex=False)]
    for _, call in chosen.reindex(columns=[*JOIN_KEYS, "aten_op", "input_shapes",
                                           "input_dtypes"]).iterrows():
        op, dtypes = str(call["aten_op"]), call["input_dtypes"]
        if not isinstance(dtypes, (tuple, list)):
            continue
        dims = gemm_dims(op, call["input_shapes"]) if op in GEMM_OPS else None
        named = dict(zip("MNK", dims, strict=True)) if dims else {}
        dtype = str(dtypes[-1] if named else dtypes[0]) if dtypes else ""
        align = ALIGNMENT.get(dtype, 0)
        rows.append({**{k: call[k] for k in JOIN_KEYS}, "aten_op": op, "dtype": dtype,
                     "dims": named or None,
                     "bad": [(d, v) for d, v in named.items() if align and v % align]})
    out = pd.DataFrame(rows, columns=columns)
    for column in JOIN_KEYS:
        out[column] = filled(out[column])
    return out


CallsOf = Callable[[pd.DataFrame], pd.DataFrame]


def _calls_where(heavy: pd.DataFrame) -> CallsOf:
    """A lookup over ``heavy`` grouped once: the calls made where a group of kernels ran
    (the join keys of its first row); none for a site the calls table lacks."""
    keys = list(JOIN_KEYS)
    groups = {key: rows for key, rows in heavy.groupby(keys, sort=False)}
    none = heavy.iloc[:0]
    return lambda group: groups.get(tuple(group[k].iat[0] for k in keys), none)


# --- gemm_misaligned -----------------------------------------------------------------------
#: What a GEMM dimension is, by the forward GEMM of the same module (M tokens, N output
#: features, K input features): a backward GEMM's M can be the output features (the weight
#: gradient of an lm_head has M = the vocabulary).
ROLES = {"M": "tokens", "N": "out_features", "K": "in_features"}
_SAID = {"tokens": "batch x sequence", "out_features": "output features",
         "in_features": "input features"}
Roles = dict[str, dict[str, int]]


def _forward_roles(heavy: pd.DataFrame) -> Roles:
    """Per module path, its forward GEMM's dimensions by role (the first such call)."""
    roles: Roles = {}
    for _, call in heavy[heavy["direction"] == "fwd"].iterrows():
        if call["dims"] and call["aten_op"] in GEMM_OPS:
            roles.setdefault(str(call["module_path"]),
                             {ROLES[d]: v for d, v in call["dims"].items()})
    return roles


def _role(dim: str, value: int, known: dict[str, int]) -> str:
    """What ``value`` (dimension ``dim`` of a call) is: the module's forward dimension of that
    size (output features first, as a vocabulary is), else what the position says."""
    for role in ("out_features", "in_features", "tokens"):
        if known.get(role) == value:
            return role
    return ROLES[dim]


def _dimension_fix(op: str, role: str, value: int, known: dict[str, int]) -> str:
    padded = -(-value // PAD_TO) * PAD_TO
    linear = op in ("mm", "addmm", "linear")
    if linear and role == "out_features" and "in_features" in known:
        return (f"pad the output features from {value} to {padded}: "
                f"nn.Linear({known['in_features']}, {padded}) and slice the output, or pad "
                "the vocabulary")
    if linear and role == "in_features" and "out_features" in known:
        return (f"pad the input features from {value} to {padded}: zero-pad the input and "
                f"use nn.Linear({padded}, {known['out_features']})")
    if role == "tokens":
        return (f"pad the rows from {value} to {padded}: a batch x sequence length that is a "
                "multiple of 8, or padded rows")
    return f"pad {value} to {padded}: zero-pad the operands and slice the result"


def _gemm_from_calls(group: pd.DataFrame, gemms: pd.DataFrame, known: dict[str, int]) -> Found:
    """One module's finding from its GEMM calls' shapes, if a dimension is off; ``known``:
    the module's forward dimensions by role (:func:`_forward_roles`)."""
    rows = group[group["is_gemm"]]
    rows = rows if len(rows) else group[group["precision"].str.startswith("tensor_")]
    tf32 = (rows["precision"] == "tensor_tf32").any()  # fp32 alignment matters only there
    bad = [(c, d, v) for _, c in gemms.iterrows() for d, v in c["bad"]
           if c["dtype"] != "float32" or tf32]
    gain = _roofline_gain(rows) if len(rows) else 0.0
    if not bad or gain <= 0:
        return []
    if not known:  # a module without a forward GEMM: each call's own dimensions
        known = {ROLES[d]: v for d, v in bad[0][0]["dims"].items()}
    shapes = "; ".join(dict.fromkeys(
        f"{c['dtype']} {c['aten_op']} {c['dims']['M']}x{c['dims']['K']} @ {c['dims']['K']}x"
        f"{c['dims']['N']}: {d} = {v} ({_SAID[_role(d, v, known)]}) is not a "
        f"multiple of {ALIGNMENT[c['dtype']]}" for c, d, v in bad))
    evidence = (f"{shapes}; the GEMM ran {rows.iloc[0]['kernel']}{_at_roof(rows)} "
                f"({_time(_per_run(rows))} per run).")
    fix = "; ".join(dict.fromkeys(_dimension_fix(c["aten_op"], _role(d, v, known), v, known)
                                  for c, d, v in bad))
    single = len(gemms) == 1 and rows["kernel"].nunique() == 1
    return [(_row(rows, "gemm_misaligned", evidence, fix[0].upper() + fix[1:] + ".", gain,
                  "roofline", "high" if single else "medium"), rows.index)]


def _gemm_misaligned(work: pd.DataFrame, heavy: pd.DataFrame) -> Found:
    """16-bit (or TF32) GEMMs with a dimension off alignment: from the calls table where it
    has the module's GEMMs, else from kernel names (``align1``/``align2``, or a pre-Hopper
    kernel on a Hopper GPU)."""
    found: Found = []
    gemms_of = _calls_where(heavy[heavy["dims"].notna()])
    roles = _forward_roles(heavy[heavy["dims"].notna()])
    work = work[_in_groups_with(work, JOIN_KEYS, work["is_gemm"] | work["precision"]
                                .astype(str).str.startswith("tensor_"))]
    hopper = work["gpu"].map(lambda g: any(h in str(g) for h in HOPPER_GPUS)).astype(bool)
    old_arch = _contains(work["kernel"], OLD_ARCH_NAMES) & hopper
    small_align = work["kernel"].map(lambda k: bool(_SMALL_ALIGN.search(str(k)))).astype(bool)
    for _, group in work.groupby(list(JOIN_KEYS), sort=False):
        mine = gemms_of(group)
        if len(mine):
            found += _gemm_from_calls(group, mine,
                                      roles.get(str(group["module_path"].iat[0]), {}))
            continue
        old, small = old_arch[group.index], small_align[group.index]
        rows = group[group["is_gemm"] & (old | small)]
        gain = _roofline_gain(rows) if len(rows) else 0.0
        if rows.empty or gain <= 0:  # an unknown gain (no roofline) is still said
            continue
        why = (f"a pre-Hopper (sm75) kernel on {rows.iloc[0]['gpu']}" if old[rows.index].any()
               else "a kernel for operands aligned to 1 or 2 elements")
        evidence = (f"cuBLAS chose {rows.iloc[0]['kernel']}, {why}: a GEMM dimension is not a "
                    f"multiple of 8; it ran{_at_roof(rows)} ({_time(_per_run(rows))} per run).")
        found.append((_row(rows, "gemm_misaligned", evidence, FIX["gemm_by_name"], gain,
                           "roofline", "medium"), rows.index))
    return found


# --- fp32_no_tensor_cores --------------------------------------------------------------------
def _fp32_data(rows: pd.DataFrame, calls_of: CallsOf) -> bool:
    """Whether the kernels work on fp32 data: their calls' dtype where the calls table has
    them, else hardly any half-precision instructions (16-bit operands need conversions)."""
    mine = calls_of(rows)
    if len(mine):
        return bool((mine["dtype"] == "float32").any())
    return bool(rows["flops_fp16"].fillna(0).sum() <= HALF_SHARE * rows["flops_fp32"].sum())


def _fp32_no_tensor_cores(work: pd.DataFrame, calls_of: CallsOf,
                          settings: Mapping[str, Any]) -> Found:
    """fp32 GEMMs and convolutions on CUDA cores with TF32 off (or unknown); gain: their
    time above the TF32 tensor roof reached at :data:`ATTAINABLE_FRACTION`."""
    tensor = work[list(TENSOR_COLUMNS)].sum(axis=1, min_count=1)
    candidates = work[(work["is_gemm"] | work["is_conv"]) & (work["precision"] == "fp32")
                      & (tensor == 0)]
    found: Found = []
    for _, rows in candidates.groupby([*SITE_KEYS, "is_conv"], sort=False):
        conv = bool(rows.iloc[0]["is_conv"])
        tf32 = tf32_enabled(settings, "conv" if conv else "matmul")
        if tf32 or not _fp32_data(rows, calls_of):
            continue
        peak = rows["peak_tensor_tf32_per_cycle"] * rows["sm_clock_hz"]
        tf32_ns = 1e9 * pd.concat([rows["flops"] / peak,
                                   rows["dram_bytes"] / rows["peak_bytes_per_s"]],
                                  axis=1).max(axis=1, skipna=False)
        gain = _per_run(rows, (rows["duration_ns"] - tf32_ns / ATTAINABLE_FRACTION)
                        .clip(lower=0.0))
        if gain <= 0:
            continue
        setting = "cudnn.allow_tf32" if conv else "cuda.matmul.allow_tf32"
        evidence = (f"fp32 {'convolution' if conv else 'GEMM'} on CUDA cores, no tensor-core "
                    f"FLOPs: {_per_run(rows, rows['flops']) / 1e9:.1f} GFLOP per run at "
                    f"{rows['flops'].sum() / rows['duration_ns'].sum() / 1e3:.1f} TFLOP/s; "
                    f"{setting} is {'unknown' if tf32 is None else 'False'}; at the TF32 "
                    f"tensor peak ({peak.max() / 1e12:.0f} TFLOP/s) its roofline is "
                    f"{_time(_per_run(rows, tf32_ns))} per run.")
        found.append((_row(rows, "fp32_no_tensor_cores", evidence,
                           FIX["fp32_conv" if conv else "fp32_matmul"], gain, "roofline",
                           "high" if tf32 is False else "medium"), rows.index))
    return found


# --- elementwise_chain -----------------------------------------------------------------------
def _chains(work: pd.DataFrame) -> list[pd.DataFrame]:
    """Runs of at least :data:`CHAIN_LENGTH` qualifying kernels in a row (launch order) in
    one module, direction and op, per (source, run, variant, shape)."""
    named = _contains(work["kernel"], ("elementwise",)) & (work["roofline_side"] != "compute")
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


def chain_kind(rows: pd.DataFrame) -> str | None:
    """What an elementwise chain computes (:data:`CHAIN_KINDS`), None when not known.

    Args:
        rows: the kernels of the chain's module, direction and op (its reductions too: an
            RMSNorm's mean is a reduce kernel between its elementwise ones)."""
    words = " ".join([*rows.get("kernel_full", pd.Series(dtype=object)).dropna().astype(str),
                      *rows.get("aten_ops", pd.Series(dtype=object)).dropna().astype(str)])
    words = words.lower()
    for kind, groups in CHAIN_KINDS:
        if all(any(w in words for w in group) for group in groups):
            return kind
    return None


def _elementwise_chain(work: pd.DataFrame) -> Found:
    """Gain per chain: its time minus one pass over its data at the chain's own achieved
    bandwidth; one pass = the DRAM bytes of the chain's largest kernel (a fused kernel reads
    the activation once and writes it once; a chain with a reduction also has kernels on
    the small reduced tensor, whose bytes say nothing of the pass). The fix is the fused op
    for what the chain computes (:func:`chain_kind`)."""
    chains = [c for c in _chains(work) if c["dram_bytes"].notna().all()
              and c["dram_bytes"].sum() > 0]
    grouped: dict[tuple[Any, ...], list[pd.DataFrame]] = {}
    for chain in chains:
        grouped.setdefault(tuple(chain.iloc[0][list(SITE_KEYS)]), []).append(chain)
    found: Found = []
    sites = work.groupby(list(SITE_KEYS), sort=False).indices if grouped else {}
    for key, parts in grouped.items():
        rows = pd.concat(parts)
        saved = pd.Series([c["duration_ns"].sum() * (1 - c["dram_bytes"].max()
                                                     / c["dram_bytes"].sum())
                           / c["runs"].iloc[0] for c in parts])
        gain = float(saved.sum())
        time, traffic = _per_run(rows), _per_run(rows, rows["dram_bytes"])
        one_pass = max(c["dram_bytes"].max() for c in parts)
        kind = chain_kind(work.iloc[sites[key]])
        what = {"rms_norm": " (an RMSNorm written out)", "layer_norm": " (a LayerNorm "
                "written out)", "rotary": " (a rotary embedding)", "gelu": " (a tanh GELU "
                "written out)", "softmax": " (masking and softmax)",
                "loss": " (the loss: upcast, log-softmax, NLL)"}.get(kind or "", "")
        evidence = (f"{len(rows) / rows['runs'].iloc[0]:g} memory-bound elementwise kernels "
                    f"in a row per run{what} ({_time(time)}, {format_bytes(traffic)} of DRAM traffic "
                    f"at {traffic / time / 1e3:.2f} TB/s); one fused pass moves about "
                    f"{format_bytes(one_pass)}, the traffic of its largest kernel.")
        found.append((_row(rows, "elementwise_chain", evidence,
                           FIX[f"chain_{kind}" if kind else "elementwise_chain"], gain,
                           "roofline", "medium"), rows.index))
    return found


# --- layout_conversion -----------------------------------------------------------------------
def _layout_conversion(work: pd.DataFrame, calls_of: CallsOf) -> Found:
    """cuDNN's NCHW <-> NHWC transposes in a convolution's module; gain: their measured time."""
    found: Found = []
    layout = _contains(work["kernel"], LAYOUT_NAMES)
    for _, group in work[_in_groups_with(work, SITE_KEYS, layout)].groupby(list(SITE_KEYS),
                                                                          sort=False):
        rows = group[layout[group.index]]
        conv = group["is_conv"].any() or calls_of(group)["aten_op"].str.contains("conv").any()
        if rows.empty or not conv:
            continue
        gain, total = _per_run(rows), _per_run(group)
        counts = rows["kernel"].value_counts(sort=False) / rows["runs"].iloc[0]
        listed = ", ".join(f"{k} x{n:g}" if n != 1 else k for k, n in counts.items())
        evidence = (f"{len(rows) / rows['runs'].iloc[0]:g} layout conversions ({listed}) "
                    f"around the convolution take {_time(gain)} per run, "
                    f"{100 * gain / total:.0f}% of the module's {_time(total)}.")
        found.append((_row(rows, "layout_conversion", evidence, FIX["layout_conversion"], gain,
                           "measured", "medium"), rows.index))
    return found


# --- small_grid ----------------------------------------------------------------------------
def _small_grid(work: pd.DataFrame, claimed: pd.Index) -> Found:
    """Latency-bound kernels under one wave holding :data:`SMALL_GRID_PCT` of their label's
    time; gain: their roofline headroom."""
    label_time = (work["duration_ns"] / work["runs"]).groupby(
        [work[c] for c in LABELS]).transform("sum")
    small = (work["waves"] < 1) | work["reason"].str.startswith("small grid")
    candidates = work[(work["bound"] == "latency") & small & ~work.index.isin(claimed)
                      & work["headroom_ns"].notna()]
    found: Found = []
    for _, rows in candidates.groupby([*SITE_KEYS, "kernel"], sort=False):
        time, gain = _per_run(rows), _per_run(rows, rows["headroom_ns"])
        share = 100.0 * time / label_time[rows.index].iloc[0]
        if share < SMALL_GRID_PCT or not gain > 0:
            continue
        waves = rows["waves"].min()
        grid = (f"a grid of {waves:.2f} waves (under one: SMs left idle)" if waves < 1
                else "a small grid")
        evidence = (f"{rows.iloc[0]['kernel']} is latency-bound with {grid},{_at_roof(rows)}: "
                    f"{_time(time)} per run, "
                    f"{share:.1f}% of the run's GPU time.")
        found.append((_row(rows, "small_grid", evidence, FIX["small_grid"], gain, "roofline",
                           "low"), rows.index))
    return found


# --- timeline --------------------------------------------------------------------------------
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
    work, heavy = _prepare(kernels), _heavy_calls(calls)
    calls_of = _calls_where(heavy)
    found: Found = [*_gemm_misaligned(work, heavy),
                    *_fp32_no_tensor_cores(work, calls_of, settings or {}),
                    *_elementwise_chain(work), *_layout_conversion(work, calls_of)]
    claimed = pd.Index([i for _, index in found for i in index])
    found += _small_grid(work, claimed)
    rows = [row for row, _ in found]
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
