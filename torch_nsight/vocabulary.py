"""The table vocabulary every stage speaks: label and join keys, module paths and the TF32
reading of the recorded settings. Stage-neutral: no torch, no pandas, so capture, report,
analyze and render all import it and none spells another's column in a fresh string.

A module path joins the qualified names of the module ranges around a kernel, outermost
first, with :data:`PATH_SEP`::

    GPT2LMHeadModel/transformer/transformer.h.0/transformer.h.0.attn

(the root range is the model's class name; every other part is the module's name in
``model.named_modules()``). A kernel outside every module range is named after the call
that launched it where one is known (:func:`outside_module`: ``(outside) cross_entropy``,
its forward and its backward alike), else has the path :data:`UNATTRIBUTED`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Literal

#: The module path (and module) of kernels that ran outside every module range, launched
#: by no call known by name.
UNATTRIBUTED = "(unattributed)"
#: Starts the module path (and module) of kernels that ran outside every module range,
#: launched by a known call (:func:`outside_module`).
OUTSIDE_PREFIX = "(outside) "
#: Joins the module names of a module path.
PATH_SEP = "/"
#: Joins the non-module ranges around a kernel into its ``context`` text.
CONTEXT_SEP = " / "

#: What tells one profiled input apart from another: the variant and the shape label.
LABELS = ("variant", "shape")
#: One site of the model: where a kernel ran (labels, module, pass, named op).
SITE_KEYS = (*LABELS, "module", "module_path", "direction", "op")
#: How a kernel meets the calls table (the module by its path, not its short name).
JOIN_KEYS = (*LABELS, "module_path", "direction", "op")
#: One kernel at one site: the rows of hotspots.
KERNEL_KEYS = (*SITE_KEYS, "kernel")

#: What the kernel table's columns hold, as a saved profile is checked when read back
#: (a column of one kind holding another is damage): names (text, or missing), flags (a
#: bool, or missing) and numbers (or missing). Columns not named may hold anything.
NAME_COLUMNS = (*KERNEL_KEYS, "context", "kernel_full", "grid", "block", "precision",
                "roofline_side", "bound", "reason", "reason_code", "basis", "sol_bottleneck",
                "gpu", "metric_set", "source", "workload", "ncu_rules", "limiter",
                "occupancy_limiter", "roof_basis", "flops_basis", "peak_basis",
                "replicated_from", "kind", "copy_kind")
FLAG_COLUMNS = ("flops_complete", "above_roof")
NUMBER_KERNEL_COLUMNS = (
    "run", "depth", "duration_ns", "sm_pct", "mem_pct", "dram_bytes", "flops", "intensity",
    "achieved_flops_per_s", "achieved_bytes_per_s", "peak_flops_per_s", "peak_bytes_per_s",
    "ridge_intensity", "roof_time_ns", "pct_of_roof", "headroom_ns", "rank", "range_index",
    "kernel_index", "start_ns", "stream", "device", "launch_ns", "launch_thread", "bytes")

#: The columns of every finding table (our checks, Nsight Compute's rules, the timeline's
#: verdicts): where, what, the evidence, the fix, its estimated gain per run and on what
#: that estimate rests.
FINDING_COLUMNS = (*SITE_KEYS, "kernels", "finding", "evidence", "fix", "est_gain_ns",
                   "gain_bound_ns", "gain_basis", "confidence")
#: What a finding is as codes, beside its words (analyze decides on these; render words
#: them): why (``cause``), the kind and class of its module, the site's aten ops, the shapes
#: of the call at fault, the dimension at fault with its role and size, the layout, the
#: dtype, the optimizer's class and how its step ran, the fix as a code with its parameters,
#: and the numbers its evidence cites (``facts``).
FINDING_CODE_COLUMNS = ("cause", "module_kind", "module_class", "aten_ops", "shapes", "dim",
                        "dim_role", "dim_value", "layout", "dtype", "optimizer",
                        "optimizer_impl", "fix_code", "fix_params", "facts")
#: The columns of :func:`torch_nsight.analyze.findings` (codes, no words): the finding
#: table's without ``evidence`` and ``fix``, which render writes from the codes.
FINDING_RECORD_COLUMNS = (*SITE_KEYS, "kernels", "finding", *FINDING_CODE_COLUMNS,
                          "est_gain_ns", "gain_bound_ns", "gain_basis", "confidence")
#: What ``profile --verify`` adds to a finding table: the basis of the prediction
#: (``est_gain_ns`` keeps it), the gain measured on the user's steps (the median difference
#: of adjacent steps without and with the fix) with its spread (half its 95% interval), the
#: median step without and with the fix, the steps timed on each side (the pairs, every run
#: pooled), and
#: whether the measurement counts (``verify_status``) with why (``verify_detail``), and the
#: switch that was measured (``verify_fix``: one fix may stand for several rows).
MEASURED_COLUMNS = ("predicted_basis", "measured_gain_ns", "measured_spread_ns", "before_ns",
                    "after_ns", "steps_timed", "verify_status", "verify_detail", "verify_fix")
#: ``gain_basis`` of a finding whose fix was measured on the user's steps.
STEPS_BASIS = "steps"

#: The columns of ``Profile.hotspots()`` (``level="kernel"``), ``Profile.modules()``,
#: ``Profile.hotspots(level="module")`` and ``Profile.findings()``: always all of them, in
#: this order (what a person reads first comes first), NaN or None where the source does not
#: tell; docs/api.md lists them. Only text output hides a column empty in every row.
PROFILE_HOTSPOT_COLUMNS = (
    "variant", "shape", "module", "direction", "op", "kernel", "duration_ns", "ci95_ns",
    "bound", "reason", "headroom_ns", "next_step", "blocks", "module_path", "launches",
    "pct_of_total", "pct_of_roof", "precision", "basis", "fused_modules", "aten_ops", "runs",
    "std_ns", "stable", "reason_code", "next_step_code")
PROFILE_MODULE_COLUMNS = (
    "variant", "shape", "module", "direction", "inclusive_ns", "exclusive_ns", "ci95_ns",
    "pct_of_total", "bound", "headroom_ns", "blocks", "module_path", "depth", "kernels",
    "exclusive_kernels", "exclusive_headroom_ns", "flops", "dram_bytes", "bound_share", "runs",
    "std_ns", "stable")
PROFILE_MODULE_HOTSPOT_COLUMNS = (
    *PROFILE_MODULE_COLUMNS[:PROFILE_MODULE_COLUMNS.index("headroom_ns") + 1], "next_step",
    *PROFILE_MODULE_COLUMNS[PROFILE_MODULE_COLUMNS.index("headroom_ns") + 1:],
    "next_step_code")
PROFILE_FINDING_COLUMNS = (
    "variant", "shape", "module", "direction", "finding", "est_gain_ns", "fix",
    "gain_bound_ns", "evidence", "confidence", "blocks", "module_path", "op", "kernels",
    "gain_basis", "cause",
    "module_kind", "module_class", "aten_ops", "shapes", "dim", "dim_role", "dim_value",
    "layout", "dtype", "optimizer", "optimizer_impl", "fix_code", "fix_params", "facts")


def outside_module(call: str) -> str:
    """The module path (and module) of the kernels that ``call`` launched outside every
    module range: ``cross_entropy`` -> ``(outside) cross_entropy``; ``GradScaler.unscale_``,
    ``clip_grad_norm_``, a PyTorch op (``ones_like``) alike. One level: its depth is 0."""
    return OUTSIDE_PREFIX + call.replace(PATH_SEP, "_")


def in_module_range(module: object) -> bool:
    """Whether a kernel of ``module`` (a module name or path) ran inside a module range:
    not :data:`UNATTRIBUTED`, not a call outside every module (:func:`outside_module`)."""
    return (isinstance(module, str) and module != UNATTRIBUTED
            and not module.startswith(OUTSIDE_PREFIX))


def join_path(parts: Iterable[str]) -> str:
    """The module path of ``parts`` (outermost first)."""
    return PATH_SEP.join(parts)


def split_path(path: str) -> list[str]:
    """The module names of ``path``, outermost first."""
    return path.split(PATH_SEP)


def path_prefix(path: str, depth: int) -> str:
    """``path`` cut after its module at ``depth`` (0: the root); :data:`UNATTRIBUTED` stays."""
    if path == UNATTRIBUTED:
        return path
    return join_path(split_path(path)[: depth + 1])


#: Every path seen, by path: the one string kept for it and its parent's, so that a tree
#: of depth D holds each ancestor once (1,000 nested ranges once took minutes and
#: gigabytes of new strings per node).
_NODES: dict[str, tuple[str, str | None]] = {}
#: The chains of shallow paths, kept whole (a kernel table asks for each row's); a deeper
#: chain is walked from :data:`_NODES` on each call: kept, the chains of a tree 10,000
#: deep would hold 50 million items.
_CHAINS: dict[str, tuple[str, ...]] = {}
_CHAIN_KEPT_DEPTH = 32
_KEPT = 1 << 16


def ancestors(path: str) -> tuple[str, ...]:
    """The paths of every module on ``path``, the root first and ``path`` itself last."""
    found = _CHAINS.get(path)
    if found is not None:
        return found
    chain = []
    node: str | None = _known(path)
    while node is not None:
        chain.append(node)
        node = _NODES[node][1]
    result = tuple(reversed(chain))
    if len(result) <= _CHAIN_KEPT_DEPTH:
        if len(_CHAINS) > _KEPT:
            _CHAINS.clear()
        _CHAINS[path] = result
    return result


def _known(path: str) -> str:
    """The string kept for ``path``, its ancestors entered in :data:`_NODES` first."""
    found = _NODES.get(path)
    if found is not None:
        return found[0]
    if len(_NODES) > _KEPT:
        _NODES.clear()
    missing = [path]  # the paths not entered yet, from ``path`` up
    above: str | None = None
    while (parent := path_parent(missing[-1])) is not None:
        entered = _NODES.get(parent)
        if entered is not None:
            above = entered[0]
            break
        missing.append(parent)
    for node in reversed(missing):
        _NODES[node] = (node, above)
        above = node
    return path


def path_depth(path: str) -> int:
    """How deep the innermost module of ``path`` lies (0: the root)."""
    return path.count(PATH_SEP)


def path_leaf(path: str) -> str:
    """The innermost module name of ``path``."""
    return path.rsplit(PATH_SEP, 1)[-1]


def path_parent(path: str) -> str | None:
    """``path`` without its innermost module; None for a root."""
    return path.rsplit(PATH_SEP, 1)[0] if PATH_SEP in path else None


#: Columns a compiled kernel gets from its graph's kernel map: its launch (one id per
#: launch of one graph call; the kernels of one extern call share it), the FLOPs Inductor's
#: nodes give that launch and their operand dtype
#: (:mod:`torch_nsight.capture.compiled.flops`).
INDUCTOR_LAUNCH = "inductor_launch"
INDUCTOR_FLOPS = "inductor_flops"
INDUCTOR_DTYPE = "inductor_dtype"
#: A copied row's column naming the measured row whose counters it carries (that row's
#: ``kernel_index``): a launch ``--replicate-launches`` did not profile, a repeated op call.
REPRESENTATIVE_INDEX = "representative_index"

#: Half-precision dtypes (by name, without ``torch.``): an op with such an input runs its
#: arithmetic in it.
HALF_DTYPES = ("bfloat16", "float16")


def operand_dtype(dtypes: object) -> str:
    """The dtype an op's arithmetic runs in, from its input dtype names: its first
    half-precision input, else its first float32 one (an attention backward's last inputs
    are int64 seeds and a float32 log-sum-exp, which say nothing of the tensor cores it
    uses), else its last; ``""`` for none."""
    if not isinstance(dtypes, (tuple, list)) or not dtypes:
        return ""
    names = [str(d) for d in dtypes]
    return next((d for d in names if d in HALF_DTYPES),
                next((d for d in names if d == "float32"), names[-1]))


# The fp32_precision tree of PyTorch 2.9 and later: a node set to "none" inherits its
# parent's value; only when every node says "none" (or was not recorded) do the legacy
# switches decide.
_PRECISION_NODES = {
    "matmul": ("cuda.matmul.fp32_precision", "fp32_precision"),
    "conv": ("cudnn.conv.fp32_precision", "cudnn.fp32_precision", "fp32_precision"),
    "rnn": ("cudnn.rnn.fp32_precision", "cudnn.fp32_precision", "fp32_precision"),
}


def tf32_enabled(settings: Mapping[str, Any], op: Literal["matmul", "conv", "rnn"]
                 ) -> bool | None:
    """Whether float32 ``op`` runs on TF32 tensor cores under the recorded ``settings``
    (:func:`torch_nsight.capture.calls.settings.read_settings`); None when they do not say.

    Honours both PyTorch APIs: the ``fp32_precision`` tree (``"tf32"`` or ``"ieee"``,
    ``"none"`` inherits) and the legacy ``allow_tf32`` switches with
    ``set_float32_matmul_precision("high" | "medium")`` for matmuls.
    """
    for key in _PRECISION_NODES[op]:
        value = settings.get(key)
        if value is not None and value != "none":
            return value == "tf32"
    if op == "matmul" and settings.get("float32_matmul_precision") in ("high", "medium"):
        return True
    legacy = settings.get("cuda.matmul.allow_tf32" if op == "matmul" else "cudnn.allow_tf32")
    return legacy if isinstance(legacy, bool) else None
