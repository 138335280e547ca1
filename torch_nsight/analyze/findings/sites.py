"""What a site is, as codes: the kind of module (from the ops the calls table records there,
else from its kernels' names), the layout of its 4-D tensors and, for an optimizer's step,
how it ran. The checks choose their fix from these, not from the kernel's family alone.

A module's kind is its class where the calls table records it and the class is one of
``torch.nn``'s (a ``Conv2d`` is a ``conv`` whatever it ran), else what it ran:
``convolution`` makes a ``conv``, ``addmm`` a ``linear``, ``native_batch_norm`` a
``batch_norm``, a ``step`` range an ``optimizer``. Profiles recorded before the calls table
held classes name only the root's class (the root range is named after it) and an
optimizer's.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import pandas as pd

from torch_nsight.analyze.findings.codes import Layout, ModuleKind, OptimizerImpl
from torch_nsight.naming import OPTIMIZER_DIRECTION
from torch_nsight.vocabulary import JOIN_KEYS, OUTSIDE_PREFIX, PATH_SEP, UNATTRIBUTED

#: Each kind by the aten ops that make it, first match wins (a block running a convolution
#: and a residual add is a convolution's site).
KIND_BY_OPS: tuple[tuple[ModuleKind, tuple[str, ...]], ...] = (
    ("conv", ("conv",)),
    ("recurrent", ("rnn", "lstm", "gru_cell", "_thnn_fused")),
    ("attention", ("scaled_dot_product", "flash_attention", "efficient_attention",
                   "cudnn_attention")),
    ("linear", ("linear", "addmm")),
    ("linear", ("mm",)),  # exactly mm (below): a Linear without bias, or its backward
    # (an MoE's experts: ``_grouped_mm``, and its fp8 ``_scaled_grouped_mm``)
    ("matmul", ("bmm", "baddbmm", "matmul", "einsum", "grouped_mm")),
    ("batch_norm", ("batch_norm",)),
    ("layer_norm", ("layer_norm",)),
    ("group_norm", ("group_norm",)),
    ("rms_norm", ("rms_norm",)),
    ("embedding", ("embedding",)),
    ("indexing", ("index_select", "gather", "scatter", "index_add", "index_put", "index",
                  "take", "index_copy")),
    ("loss", ("nll_loss", "cross_entropy", "mse_loss", "l1_loss", "binary_cross_entropy",
              "smooth_l1_loss", "kl_div")),
    ("pool", ("pool",)),
    ("activation", ("relu", "gelu", "silu", "sigmoid", "tanh", "threshold", "hardswish",
                    "hardsigmoid", "elu", "softplus", "mish", "leaky_relu", "prelu")),
)
#: Ops matched whole, not as a part of a name (``mm`` is in ``addmm`` and ``bmm``; ``index``
#: in ``index_select``).
_WHOLE = frozenset({"mm", "index", "take"})
#: Each kind by its kernels' names, where the calls table has nothing for the site.
KIND_BY_KERNELS: tuple[tuple[ModuleKind, re.Pattern[str]], ...] = (
    # cuDNN's attention kernels say fprop and bprop too: attention first
    ("attention", re.compile(r"fmha|flash|sdpa|attention", re.I)),
    ("conv", re.compile(r"conv|fprop|dgrad|wgrad", re.I)),
    ("recurrent", re.compile(r"rnn|lstm", re.I)),
    # a GEMM before the norms: a compiled region's fused kernels name a norm beside it
    ("gemm", re.compile(r"gemm|nvjet|cutlass|xmma|gemv", re.I)),
    ("batch_norm", re.compile(r"batch_norm", re.I)),
    ("layer_norm", re.compile(r"layer_norm|LayerNorm|GammaBeta", re.I)),
    ("embedding", re.compile(r"embedding", re.I)),
    ("indexing", re.compile(r"gather|scatter|index|radix|sort", re.I)),
    ("pool", re.compile(r"pool", re.I)),
)


#: The kind of each of ``torch.nn``'s module classes (by class name), first match wins.
KIND_BY_CLASS: tuple[tuple[ModuleKind, re.Pattern[str]], ...] = (
    ("conv", re.compile(r"^(Lazy)?Conv(Transpose)?[123]d$")),
    ("linear", re.compile(r"^(Lazy)?Linear$|^Bilinear$")),
    ("recurrent", re.compile(r"^(RNN|LSTM|GRU)(Cell)?$")),
    ("attention", re.compile(r"^MultiheadAttention$")),
    ("batch_norm", re.compile(r"^(Lazy|Sync)?BatchNorm[123]?d?$")),
    ("layer_norm", re.compile(r"^LayerNorm$")),
    ("group_norm", re.compile(r"^GroupNorm$")),
    ("rms_norm", re.compile(r"^RMSNorm$")),
    ("embedding", re.compile(r"^Embedding(Bag)?$")),
    ("pool", re.compile(r"Pool[123]d$")),
    ("loss", re.compile(r"Loss$")),
    ("activation", re.compile(r"^(ReLU6?|GELU|SiLU|Sigmoid|Tanh|Hardswish|Hardsigmoid|ELU|"
                              r"Softplus|Mish|LeakyReLU|PReLU)$")),
)
_TORCH_NN = "torch.nn."


def kind_of_class(module_class: object) -> ModuleKind | None:
    """The kind of a module of the qualified class ``module_class``
    (``torch.nn.modules.conv.Conv2d``); None for a class not of ``torch.nn`` (what a
    user's class is, its ops say) or one this table does not know."""
    if not isinstance(module_class, str) or not module_class.startswith(_TORCH_NN):
        return None
    name = module_class.rsplit(".", 1)[-1]
    for kind, pattern in KIND_BY_CLASS:
        if pattern.search(name):
            return kind
    return None


def short_class(module_class: object) -> str | None:
    """A qualified class's own name (``Conv2d``); None for None."""
    if not isinstance(module_class, str) or not module_class:
        return None
    return module_class.rsplit(".", 1)[-1]


def module_classes(calls: pd.DataFrame | None) -> dict[str, str]:
    """The qualified class of each module path the calls table records one for (tables
    recorded before classes were recorded have none; a path whose calls disagree is left
    out)."""
    if calls is None or "module_class" not in calls or "module_path" not in calls:
        return {}
    known = calls[["module_path", "module_class"]].dropna().drop_duplicates()
    single = known.drop_duplicates("module_path", keep=False)
    return dict(zip(single["module_path"], single["module_class"], strict=True))


def _has(ops: Iterable[str], words: tuple[str, ...]) -> bool:
    for op in ops:
        for word in words:
            if (op == word) if word in _WHOLE else (word in op):
                return True
    return False


#: Calls that compute nothing a fusion or a fix saves: copies, views, fills, allocations (as
#: :func:`op_word` writes them).
NOT_COMPUTING = frozenset({"to_copy", "copy", "clone", "view", "new_zeros", "zeros", "zero",
                           "zeros_like", "empty", "empty_like", "fill", "arange",
                           "scalar_tensor", "set"})


def op_word(op: str) -> str:
    """An aten op's name as the kinds read it: lower case, no leading or trailing ``_``."""
    return op.lower().strip("_")


def kind_of_ops(ops: Iterable[str]) -> ModuleKind | None:
    """The kind of a site whose calls are ``ops`` (aten op names); None for no op, or only
    copies and views (:data:`NOT_COMPUTING`); ``elementwise`` for other ops."""
    ops = [op_word(str(o)) for o in ops if isinstance(o, str) and o]
    for kind, words in KIND_BY_OPS:
        if _has(ops, words):
            return kind
    plain = [o for o in ops if o not in NOT_COMPUTING]
    return "elementwise" if plain else None


def kind_of_kernels(kernels: Iterable[str]) -> ModuleKind | None:
    """The kind of a site from its kernels' names alone (no calls for it); None when they
    do not say (plain elementwise kernels say nothing of the module)."""
    names = [str(k) for k in kernels if isinstance(k, str)]
    for kind, pattern in KIND_BY_KERNELS:
        if any(pattern.search(name) for name in names):
            return kind
    return None


def site_kind(direction: object, module_path: object, ops: Iterable[str],
              kernels: Iterable[str], module_class: object = None) -> ModuleKind | None:
    """The kind of one site: an optimizer's step, else its module's ``torch.nn`` class,
    else its ops, else its kernels' names (an optimizer's multi-tensor kernels left out:
    outside a step range they share the unattributed site with whatever else ran there)."""
    if direction == OPTIMIZER_DIRECTION and not str(module_path).startswith(OUTSIDE_PREFIX):
        return "optimizer"
    kernels = [k for k in kernels if "multi_tensor_apply" not in str(k)]
    return kind_of_class(module_class) or kind_of_ops(ops) or kind_of_kernels(kernels)


_CHANNELS_LAST = re.compile(r"channels_last|nhwc(?!ToNchw)", re.I)
_CONVERTED = re.compile(r"nchwToNhwc|nhwcToNchw")
#: NCHW kernels by name: batch norm's kernels without ``channels_last``, cuDNN's NCHW
#: convolutions.
_NCHW = re.compile(r"^batch_norm_(?!.*channels_last)|implicit_convolve_sgemm|"
                   r"explicit_convolve_sgemm|nchw(?!ToNhwc)", re.I)


def layout_of(kernels: Iterable[str]) -> Layout | None:
    """``nchw`` where a site's kernels convert an NCHW tensor or are NCHW kernels,
    ``channels_last`` where they are NHWC kernels, None where their names do not say."""
    names = [str(k) for k in kernels if isinstance(k, str)]
    if any(_CONVERTED.search(n) for n in names) or any(_NCHW.search(n) for n in names):
        return "nchw"
    if any(_CHANNELS_LAST.search(n) for n in names):
        return "channels_last"
    return None


_FUSED_FUNCTOR = re.compile(r"Fused\w*Functor")


def optimizer_impl(kernels_full: Iterable[str], kernels: Iterable[str]) -> OptimizerImpl:
    """How an optimizer's step ran, from its kernels (see
    :data:`~torch_nsight.analyze.findings.codes.OptimizerImpl`)."""
    full = [str(k) for k in kernels_full if isinstance(k, str)]
    names = [str(k) for k in kernels if isinstance(k, str)]
    if any(_FUSED_FUNCTOR.search(k) for k in full):
        return "fused"
    if any(n.startswith("triton") for n in names):
        return "compiled"
    if any("multi_tensor_apply" in n for n in names):
        return "foreach"
    return "for_loop"


_DTYPES = re.compile(r"c10::\w+|\bfloat\b|\bdouble\b|\(int\)\d+|\(bool\)\d+|\(T1.*$")


def foreach_ops(kernels_full: Iterable[str]) -> set[str]:
    """The distinct ops of an optimizer's foreach kernels (its functor and math, whatever
    the dtype: a step over bf16 and fp32 parameters launches each op twice): one op is one
    pass over the parameters."""
    found: set[str] = set()
    for full in kernels_full:
        if isinstance(full, str):
            found.add(_DTYPES.sub("", full.partition("Metadata<")[2] or full))
    return found


def optimizer_class(direction: object, module: object) -> str | None:
    """The optimizer's class where its step range names it (``step:AdamW`` reads back as
    module ``AdamW``, direction ``step``); None outside a step range."""
    if direction == OPTIMIZER_DIRECTION and isinstance(module, str) and module \
            and module != UNATTRIBUTED and not module.startswith(OUTSIDE_PREFIX):
        return module
    return None


def root_class(module_path: object) -> str | None:
    """The model's class (the root range is named after it), for a site at the root."""
    if isinstance(module_path, str) and module_path and module_path != UNATTRIBUTED \
            and PATH_SEP not in module_path:
        return module_path
    return None


def ops_at(calls: pd.DataFrame) -> tuple[str, ...]:
    """The distinct aten ops of a site's calls, in call order."""
    if calls.empty or "aten_op" not in calls:
        return ()
    return tuple(dict.fromkeys(str(o) for o in calls["aten_op"] if isinstance(o, str)))


@dataclass(frozen=True)
class Site:
    """What one site (labels, module path, direction, op) is, as codes.

    Attributes:
        ops: the aten ops the calls table records there, in call order.
        kind: the kind of module (:func:`site_kind`).
        layout: the layout of its 4-D tensors from its kernels' names, or None (also where
            the calls table records the site's calls and none of them takes a 4-D tensor: a
            ``Conv1d`` cuDNN runs as an NCHW convolution has no channels-last layout).
        recorded: whether the calls table has any call at this site.
        module_class: the qualified class of its module, where the calls table records it.
        planar: whether any call the calls table records there takes a 4-D tensor of more
            than one pixel (what channels-last lays out: :func:`lays_out`), of its
            convolutions and batch norms where it records any (:func:`laid_out`); None where
            it records none.
        softmax_lengths: the last dimension of each softmax recorded there (forward,
            backward or SDPA's math path), the lengths attention written out normalises over.
    """

    ops: tuple[str, ...]
    kind: ModuleKind | None
    layout: Layout | None
    recorded: bool
    module_class: str | None = None
    planar: bool | None = None
    softmax_lengths: frozenset[int] = frozenset()


def describe_sites(work: pd.DataFrame, calls: pd.DataFrame | None
                   ) -> dict[tuple[Any, ...], Site]:
    """Each site of ``work`` (the prepared kernel table, keys ``""`` where missing) as a
    :class:`Site`, by its join keys."""
    ops: dict[tuple[Any, ...], tuple[str, ...]] = {}
    four_d: dict[tuple[Any, ...], bool] = {}  # whether any call there takes a 4-D tensor
    planar: dict[tuple[Any, ...], bool] = {}  # ... one with more than one pixel (lays_out)
    lengths: dict[tuple[Any, ...], frozenset[int]] = {}  # softmax_lengths
    if calls is not None and "aten_op" in calls and len(calls):
        keyed_calls = calls.reindex(columns=[*JOIN_KEYS, "aten_op", "input_shapes"]
                                    ).astype(object)
        keyed_calls[list(JOIN_KEYS)] = keyed_calls[list(JOIN_KEYS)].mask(
            keyed_calls[list(JOIN_KEYS)].isna(), "")
        for key, rows in keyed_calls.groupby(list(JOIN_KEYS), sort=False):
            ops[tuple(key)] = ops_at(rows)
            four_d[tuple(key)] = any(takes_4d(shapes) for shapes in rows["input_shapes"])
            planar[tuple(key)] = any(lays_out(shapes) for shapes in laid_out(rows))
            lengths[tuple(key)] = softmax_lengths(rows)
    classes = module_classes(calls)
    sites = {}
    for key, rows in work.groupby(list(JOIN_KEYS), sort=False):
        key = tuple(key)
        mine = ops.get(key, ())
        direction, path = key[JOIN_KEYS.index("direction")], key[JOIN_KEYS.index("module_path")]
        layout = layout_of(rows["kernel"].tolist()) if four_d.get(key, True) else None
        module_class = classes.get(path)
        sites[key] = Site(mine, site_kind(direction, path, mine, rows["kernel"].tolist(),
                                          module_class),
                          layout, recorded=key in ops, module_class=module_class,
                          planar=planar.get(key),
                          softmax_lengths=lengths.get(key, frozenset()))
    return sites


def _of_rank(shapes: object, rank: int) -> list[Any]:
    """The shapes of ``rank`` dimensions among a call's input shapes."""
    if not isinstance(shapes, (list, tuple)):
        return []
    return [s for s in shapes if isinstance(s, (list, tuple)) and len(s) == rank]


def _four_d(shapes: object) -> list[Any]:
    """The 4-D shapes among a call's input shapes."""
    return _of_rank(shapes, 4)


#: Words of the aten ops whose tensors channels-last lays out (convolutions, batch norms).
LAYOUT_OP_WORDS = ("conv", "batch_norm")


def laid_out(calls: pd.DataFrame) -> pd.Series:
    """The input shapes of the calls that :attr:`Site.planar` asks: the convolutions' and
    batch norms' where the site records any (a ``Conv1d`` called as ``F.conv1d`` inside a
    module whose other ops take 4-D tensors lays nothing out), else every call's."""
    ops = calls["aten_op"].astype(str)
    mine = ops.map(lambda op: any(word in op for word in LAYOUT_OP_WORDS)).astype(bool)
    return calls.loc[mine, "input_shapes"] if mine.any() else calls["input_shapes"]


def takes_4d(shapes: object) -> bool:
    """Whether a call's input shapes hold a 4-D tensor (what channels-last lays out)."""
    return bool(_four_d(shapes))


def takes_5d(shapes: object) -> bool:
    """Whether a call's input shapes hold a 5-D tensor (N x C x D x H x W: what
    ``torch.channels_last_3d`` lays out)."""
    return bool(_of_rank(shapes, 5))


def layout_params(calls_shapes: Iterable[object]) -> dict[str, int] | None:
    """What channels-last lays out among these calls' input shapes: ``{}`` where one takes
    a 4-D tensor (``torch.channels_last``), ``{"ndim": 5}`` where none does and one takes a
    5-D tensor (``torch.channels_last_3d``: a ``fix_params``), None where neither (a
    ``Conv1d``: no switch)."""
    shapes = list(calls_shapes)
    if any(takes_4d(s) for s in shapes):
        return {}
    return {"ndim": 5} if any(takes_5d(s) for s in shapes) else None


#: The softmax ops, forward and backward (``_safe_softmax``: SDPA's math path).
SOFTMAX_OPS = frozenset({"_softmax", "softmax", "_softmax_backward_data", "_safe_softmax"})


def softmax_lengths(calls: pd.DataFrame) -> frozenset[int]:
    """The last dimension of the first input of each softmax among ``calls`` (rows of the
    calls table with ``aten_op`` and ``input_shapes``)."""
    found = calls.loc[calls["aten_op"].isin(SOFTMAX_OPS), "input_shapes"]
    return frozenset(int(shapes[0][-1]) for shapes in found
                     if isinstance(shapes, (list, tuple)) and shapes
                     and isinstance(shapes[0], (list, tuple)) and shapes[0]
                     and isinstance(shapes[0][-1], int))


def lays_out(shapes: object) -> bool:
    """Whether a call's input shapes hold a 4-D tensor that channels-last lays out otherwise
    than NCHW: one of more than one pixel (an N x C x 1 x 1 tensor is both layouts at once,
    and PyTorch may run its channels-last kernels on it in an NCHW model)."""
    return any(not (s[2] == 1 and s[3] == 1) for s in _four_d(shapes))


def flat_rows(work: pd.DataFrame, sites: Mapping[tuple[Any, ...], Site],
              mask: pd.Series) -> pd.Series:
    """For each row of ``work`` (the checks' prepared table) where ``mask`` holds, whether
    its site's recorded calls lay nothing out (:attr:`Site.planar` False: a batch norm over
    (N, C, L) or N x C x 1 x 1); each such site asked once. False elsewhere."""
    flat = pd.Series(False, index=work.index)
    if mask.any():
        for key, rows in work[mask].groupby(list(JOIN_KEYS), sort=False, dropna=False):
            site = sites.get(tuple(key))
            if site is not None and site.planar is False:
                flat[rows.index] = True
    return flat
