"""The calls table as the checks read it: each GEMM and convolution call with its dtype,
(M, N, K) and the dimensions off their dtype's alignment, looked up by where kernels ran."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pandas as pd

from torch_nsight.analyze.frames import filled
from torch_nsight.shape_flops import GROUPED_GEMM_OPS
from torch_nsight.vocabulary import JOIN_KEYS

#: Tensor-core GEMM dimensions should be multiples of this many elements, per input dtype.
ALIGNMENT = {"bfloat16": 8, "float16": 8, "float32": 4}
GEMM_OPS = frozenset({"mm", "addmm", "bmm", "baddbmm", "linear", "matmul", *GROUPED_GEMM_OPS})
#: What a GEMM dimension is, by the forward GEMM of the same module (M tokens, N output
#: features, K input features): a backward GEMM's M can be the output features (the weight
#: gradient of an lm_head has M = the vocabulary); and a convolution's.
ROLES = {"M": "tokens", "N": "out_features", "K": "in_features", "C_in": "in_channels",
         "C_out": "out_channels", "HxW": "spatial"}
#: The roles that are a GEMM's strides (leading dimensions). Row-major ``(M, K) @ (K, N)``
#: has strides K and N, and so have the two GEMMs of its backward (their operands are views
#: of the same tensors): the rows (tokens) never set an operand's alignment. ``sequence``:
#: the stride of attention's batched matmuls (see ``gemm_misaligned``).
STRIDE_ROLES = frozenset({"out_features", "in_features", "sequence"})
Roles = dict[str, dict[str, int]]
CallsOf = Callable[[pd.DataFrame], pd.DataFrame]


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


def _operand(op: str, inputs: int) -> int:
    """Which input of a GEMM call holds its second operand: the last (``mm``; ``addmm``'s
    bias comes first), a grouped GEMM's second (its group offsets come after)."""
    return 1 if op in GROUPED_GEMM_OPS and inputs > 1 else inputs - 1


def conv_dims(shapes: Any, outputs: Any) -> dict[str, int] | None:
    """A convolution call's channels and output positions: ``C_in`` (per group, as the
    weight holds them), ``C_out`` and ``HxW`` (the output's spatial positions, the GEMM
    dimension a 1x1 convolution runs over in NCHW); None when the shapes do not say."""
    try:
        x, w = [tuple(int(d) for d in s) for s in shapes[:2]]
        out = tuple(int(d) for d in outputs[0]) if outputs else ()
        if len(x) < 3 or len(w) < 3:
            return None
        spatial = math.prod(out[2:]) if len(out) >= 3 else math.prod(x[2:])
        return {"C_in": w[1], "C_out": w[0], "HxW": spatial}
    except (TypeError, ValueError, IndexError):
        return None


def off_alignment(value: int, align: int, gemm: bool) -> bool:
    """Whether a dimension is off its dtype's alignment (``align`` elements; 0: unknown). A
    GEMM dimension under ``align`` is none: a matrix-vector product (a dimension of 1) or a
    handful of columns, whose padding multiplies the work it pads; a convolution's channels
    under it (an image's 3) are, padded to :data:`~.gemm_misaligned.CHANNELS_TO`."""
    return bool(align) and value % align != 0 and not (gemm and value < align)


def heavy_calls(calls: pd.DataFrame | None) -> pd.DataFrame:
    """The GEMM and convolution calls: join keys, ``aten_op``, ``dtype`` (of the last input;
    of the first for a convolution), ``dims`` (M, N, K of a GEMM; ``C_in``, ``C_out``,
    ``HxW`` of a forward convolution; None otherwise), ``shapes`` (the input shapes) and
    ``bad`` (the dimensions off their dtype's alignment: a GEMM's three, a convolution's
    channels)."""
    columns = [*JOIN_KEYS, "aten_op", "dtype", "dims", "shapes", "bad"]
    if calls is None or "aten_op" not in calls or "input_dtypes" not in calls:
        return pd.DataFrame(columns=columns)
    rows = []
    ops = calls["aten_op"].astype(str)
    chosen = calls[ops.isin(GEMM_OPS) | ops.str.contains("conv", regex=False)]
    for _, call in chosen.reindex(columns=[*JOIN_KEYS, "aten_op", "input_shapes",
                                           "input_dtypes", "output_shapes"]).iterrows():
        op, dtypes = str(call["aten_op"]), call["input_dtypes"]
        if not isinstance(dtypes, (tuple, list)):
            continue
        gemm = op in GEMM_OPS
        if gemm:
            found = gemm_dims(op, call["input_shapes"])
            named = dict(zip("MNK", found, strict=True)) if found else {}
        else:  # a forward convolution: (input, weight, ...) -> output
            named = (conv_dims(call["input_shapes"], call["output_shapes"])
                     if "backward" not in op else None) or {}
        dtype = str(dtypes[_operand(op, len(dtypes)) if gemm and named else 0]) if dtypes else ""
        align = ALIGNMENT.get(dtype, 0)
        checked = named if gemm else {d: v for d, v in named.items() if d != "HxW"}
        shapes = call["input_shapes"]
        rows.append({**{k: call[k] for k in JOIN_KEYS}, "aten_op": op, "dtype": dtype,
                     "dims": named or None,
                     "shapes": tuple(shapes) if isinstance(shapes, (tuple, list)) else None,
                     "bad": [(d, v) for d, v in checked.items() if off_alignment(v, align, gemm)]})
    out = pd.DataFrame(rows, columns=columns)
    for column in JOIN_KEYS:
        out[column] = filled(out[column])
    return out


def calls_where(heavy: pd.DataFrame) -> CallsOf:
    """A lookup over ``heavy`` grouped once: the calls made where a group of kernels ran
    (the join keys of its first row); none for a site the calls table lacks."""
    keys = list(JOIN_KEYS)
    groups = {key: rows for key, rows in heavy.groupby(keys, sort=False)}
    none = heavy.iloc[:0]
    return lambda group: groups.get(tuple(group[k].iat[0] for k in keys), none)


def forward_roles(heavy: pd.DataFrame) -> Roles:
    """Per module path, its forward GEMM's (or convolution's) dimensions by role (the first
    such call)."""
    roles: Roles = {}
    for _, call in heavy[heavy["direction"] == "fwd"].iterrows():
        if call["dims"]:
            roles.setdefault(str(call["module_path"]),
                             {ROLES[d]: v for d, v in call["dims"].items()})
    return roles


def role_of(dim: str, value: int, known: dict[str, int]) -> str:
    """What ``value`` (dimension ``dim`` of a call) is: the module's forward dimension of that
    size (output features first, as a vocabulary is), else what the position says."""
    for role in ("out_features", "in_features", "tokens"):
        if known.get(role) == value:
            return role
    return ROLES[dim]
