"""``elementwise_chain``: at least :data:`CHAIN_LENGTH` memory-bound elementwise kernels in a
row in one module; gain: their time minus one fused pass over their data.

The fix is the fused op for what the chain computes (:func:`chain_kind`), recognised by the
ops that ran at the site (the calls table's aten ops, else the functors in the kernels'
names): a rotary embedding only where its ops ran (``sin`` and ``cos``, or rotate-half's
``neg`` and ``cat``), a tanh GELU only where ``tanh`` ran without ``sigmoid`` (an LSTM cell
has both), attention's softmax only beside attention's batched matmuls. An optimizer's
step is :mod:`.optimizer_step`'s.

A chain fuses only where its kernels compute: dtype copies of separate tensors (autocast's
casts of a Linear's weight, bias and input, and their gradients cast back) have nothing to
fuse into, so a run needs at least :data:`COMPUTING` kernels that are not copies. And a
module compiled alone must save more per call than a compiled region costs the CPU
(:data:`COMPILED_CALL_NS`); a chain that saves less is told to compile the model instead.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from torch_nsight.analyze.findings.codes import Cause, FixCode, fix_fits
from torch_nsight.analyze.findings.prepare import contains, full_names, per_run
from torch_nsight.analyze.findings.record import Finding
from torch_nsight.analyze.findings.registry import Context, finding_check
from torch_nsight.analyze.findings.sites import NOT_COMPUTING, op_word
from torch_nsight.analyze.roofline import TENSOR_COLUMNS
from torch_nsight.vocabulary import LABELS, SITE_KEYS, UNATTRIBUTED, in_module_range

#: This many qualifying kernels in a row, in one module.
CHAIN_LENGTH = 3
#: Kernels of a chain that are not dtype copies (:data:`COPY_FUNCTORS`): at least this many.
COMPUTING = 2
#: ATen calls that run a library's whole layer with the library's own kernels (cuDNN's and
#: MIOpen's recurrent layers: ``elemWiseRNNcell``, ``LSTM_elementWise_bp1``...), as
#: :func:`~.sites.op_word` writes them: torch.compile passes them through, so their
#: elementwise kernels fuse with nothing.
LIBRARY_CALLS = ("cudnn_rnn", "miopen_rnn")
#: PyTorch's copy functors (``bfloat16_copy_kernel_cuda``, ``direct_copy_kernel_cuda``...),
#: in a kernel's full name: a ``.to(dtype)`` or ``copy_``, which fuses only into a consumer.
COPY_FUNCTORS = ("copy_kernel",)
#: What one call of a module compiled on its own costs the step's CPU, per direction: half
#: of the 360-430 µs a compiled ``nn.Linear`` or ``nn.GELU`` added to a CPU-bound training
#: step per forward and backward (``bench/compiled_call_cost.py``, H100, torch 2.11,
#: 2026-11-28; docs/benchmarks.md). A model-free figure: no model's finding was fitted.
COMPILED_CALL_NS = 180_000.0
#: What a chain computes, from the words of its site (aten ops, kernel functors; lower case):
#: the first kind whose every group of words has one present, and none of its ``absent``
#: words, names the fix.
CHAIN_KINDS: tuple[tuple[Cause, tuple[tuple[str, ...], ...], tuple[str, ...]], ...] = (
    # a loss first: its log-softmax is no attention's softmax
    ("loss", (("nll_loss", "cross_entropy", "log_softmax"),), ()),
    # attention advice only where attention's batched matmuls ran
    ("softmax", (("softmax", "masked_fill", "where_kernel", "exp_kernel"),
                 ("bmm", "baddbmm", "einsum")), ()),
    ("layer_norm", (("rsqrt", "sqrt"), ("meanops", "mean", "var"), ("sub",)), ()),
    ("rms_norm", (("rsqrt",), ("meanops", "mean")), ()),
    # the tanh formula: tanh and a cube (pow, or x * x * x); an LSTM cell's tanh comes with
    # its gates' sigmoid
    ("gelu", (("tanh",), ("pow", "mul")), ("sigmoid",)),
    # the embedding's cos and sin, or rotate_half's negation and concatenation with the
    # products that apply it
    ("rotary", (("sin_kernel", "sin,", " sin ", "cos_kernel", "cos,", " cos "),
                ("cos_kernel", "cos,", " cos ")), ()),
    ("rotary", (("neg_kernel", " neg ", "neg,"), ("cat", "catarraybatchedcopy"),
                ("mul",)), ()),
)
#: The fix for what the chain computes; anything else is fused by torch.compile.
CHAIN_FIX: dict[str, FixCode] = {
    "loss": "compile_loss", "softmax": "use_sdpa", "layer_norm": "use_layer_norm",
    "rms_norm": "use_rms_norm", "gelu": "use_gelu_tanh", "rotary": "compile_rotary",
}


def _chains(work: pd.DataFrame) -> list[pd.DataFrame]:
    """Runs of at least :data:`CHAIN_LENGTH` qualifying kernels in a row (launch order) in
    one module, direction and op, per (source, run, variant, shape)."""
    named = contains(work["kernel"], ("elementwise",)) & (work["roofline_side"] != "compute")
    tensor = work[list(TENSOR_COLUMNS)].sum(axis=1).fillna(0.0)
    plain = ((work["bound"] == "memory") & (work["roofline_side"] != "compute")
             & (tensor == 0) & ~work["is_gemm"] & ~work["is_conv"])
    # (an optimizer's kernels are optimizer_step's; Inductor's were fused by torch.compile)
    ok = (named | plain) & ~work["is_optimizer"] & ~work["is_compiled"]
    chains = []
    for _, sequence in work.groupby(["source", "run", *LABELS], sort=False):
        place = (sequence["module_path"].astype(str) + "|" + sequence["direction"].astype(str)
                 + "|" + sequence["op"].astype(str))
        qualified = ok[sequence.index]
        block = ((place != place.shift()) | (qualified != qualified.shift())).cumsum()
        for _, rows in sequence.groupby(block, sort=False):
            if qualified[rows.index].all() and len(rows) >= CHAIN_LENGTH \
                    and _computing(rows) >= COMPUTING:
                chains.append(rows)
    return chains


def _library_layer(ops: tuple[str, ...]) -> bool:
    """Whether a site's calls are a library's layer (:data:`LIBRARY_CALLS`) and nothing
    else that computes: its elementwise kernels are the library's own."""
    words = [op_word(op) for op in ops]
    return any(w.startswith(LIBRARY_CALLS) for w in words) and all(
        w.startswith(LIBRARY_CALLS) or w in NOT_COMPUTING for w in words)


def _computing(rows: pd.DataFrame) -> int:
    """How many of the chain's kernels compute: those that are not dtype copies."""
    return int((~contains(full_names(rows), COPY_FUNCTORS)).sum())


def site_words(rows: pd.DataFrame, ops: tuple[str, ...] = ()) -> str:
    """The words a chain's kind is read from: its site's kernel functors (full names), its
    aten ops (the kernel table's and the calls table's), lower case, space-separated."""
    words = [*rows.get("kernel_full", pd.Series(dtype=object)).dropna().astype(str),
             *rows.get("kernel", pd.Series(dtype=object)).dropna().astype(str),
             *rows.get("aten_ops", pd.Series(dtype=object)).dropna().astype(str), *ops]
    return " " + " ".join(w.replace(",", " , ") for w in words).lower() + " "


def chain_kind(rows: pd.DataFrame, ops: tuple[str, ...] = ()) -> Cause | None:
    """What an elementwise chain computes (:data:`CHAIN_KINDS`), None when not known.

    Args:
        rows: the kernels of the chain's module, direction and op (its reductions too: an
            RMSNorm's mean is a reduce kernel between its elementwise ones).
        ops: the aten ops the calls table records at the site.
    """
    words = site_words(rows, ops)
    for kind, groups, absent in CHAIN_KINDS:
        if all(any(w in words for w in group) for group in groups) \
                and not any(w in words for w in absent):
            return kind
    return None


@finding_check("elementwise_chain")
def elementwise_chain(context: Context) -> list[Finding]:
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
    found: list[Finding] = []
    sites = work.groupby(list(SITE_KEYS), sort=False).indices if grouped else {}
    for key, parts in grouped.items():
        rows = pd.concat(parts)
        site = context.site(rows)
        if _library_layer(site.ops):
            continue
        saved = pd.Series([c["duration_ns"].sum() * (1 - c["dram_bytes"].max()
                                                     / c["dram_bytes"].sum())
                           / c["runs"].iloc[0] for c in parts])
        kind = chain_kind(work.iloc[sites[key]], site.ops)
        # no module to compile: unattributed, or a call of the loop's own (a loss, GradScaler)
        outside = not in_module_range(rows["module_path"].iat[0] or UNATTRIBUTED)
        default: FixCode = "compile_function" if outside else "compile_module"
        code: FixCode = CHAIN_FIX.get(kind or "", default)
        if not fix_fits(site.kind, code):  # the ops of a rotary embedding in a gather's or
            kind, code = None, default      # a MoE gate's backward are no rotary embedding
            if not fix_fits(site.kind, code):
                code = "none_known"
        calls = len(parts) / rows["runs"].iloc[0]  # module calls that ran a chain, per run
        if code == "compile_module" and saved.sum() < calls * COMPILED_CALL_NS:
            code = "compile_model"  # compiled alone, each call costs more than it saves
        found.append(Finding(
            "elementwise_chain", rows, float(saved.sum()), "roofline", "medium", code,
            cause=kind, module_kind=site.kind, aten_ops=site.ops, layout=site.layout,
            facts={"kernels_per_run": len(rows) / rows["runs"].iloc[0],
                   "time_ns": per_run(rows),
                   "traffic_bytes": per_run(rows, rows["dram_bytes"]),
                   "one_pass_bytes": max(c["dram_bytes"].max() for c in parts),
                   "module_calls": calls, "compiled_call_ns": COMPILED_CALL_NS}))
    return found
