"""The calls table as the checks read it: each GEMM and convolution call with its dtype,
(M, N, K) and the dimensions off their dtype's alignment, looked up by where kernels ran."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pandas as pd

from torch_nsight.analyze.frames import filled
from torch_nsight.vocabulary import JOIN_KEYS

#: Tensor-core GEMM dimensions should be multiples of this many elements, per input dtype.
ALIGNMENT = {"bfloat16": 8, "float16": 8, "float32": 4}
GEMM_OPS = frozenset({"mm", "addmm", "bmm", "baddbmm", "linear", "matmul"})
#: What a GEMM dimension is, by the forward GEMM of the same module (M tokens, N output
#: features, K input features): a backward GEMM's M can be the output features (the weight
#: gradient of an lm_head has M = the vocabulary).
ROLES = {"M": "tokens", "N": "out_features", "K": "in_features"}
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


def heavy_calls(calls: pd.DataFrame | None) -> pd.DataFrame:
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


def calls_where(heavy: pd.DataFrame) -> CallsOf:
    """A lookup over ``heavy`` grouped once: the calls made where a group of kernels ran
    (the join keys of its first row); none for a site the calls table lacks."""
    keys = list(JOIN_KEYS)
    groups = {key: rows for key, rows in heavy.groupby(keys, sort=False)}
    none = heavy.iloc[:0]
    return lambda group: groups.get(tuple(group[k].iat[0] for k in keys), none)


def forward_roles(heavy: pd.DataFrame) -> Roles:
    """Per module path, its forward GEMM's dimensions by role (the first such call)."""
    roles: Roles = {}
    for _, call in heavy[heavy["direction"] == "fwd"].iterrows():
        if call["dims"] and call["aten_op"] in GEMM_OPS:
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
