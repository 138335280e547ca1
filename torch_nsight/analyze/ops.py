"""Kernels named by the torch ops that launched them: ``aten_ops`` from the calls table.

The calls table records, per module and direction, every aten op with its count; a kernel
only knows its library name (``vectorized_elementwise_kernel``, ``CatArrayBatchedCopy``).
The kernels of one module are matched to its ops by family: a GEMM kernel to the matrix
products, an attention kernel to attention, ``CatArrayBatchedCopy`` to ``cat``, an
elementwise kernel to the elementwise ops, and so on::

    module                   kernel                          aten_ops
    transformer.h.0.mlp.act  vectorized_elementwise_kernel   mul, pow, add, tanh
    transformer.h.0.attn     CatArrayBatchedCopy             cat
    transformer.h.0.mlp.c_fc nvjet_sm90_tst_256x128_..._NNT  addmm

A module with one op names all its kernels by it. Which of several elementwise ops one
launch ran is not known (the table counts ops, it does not order launches): the row names
them all, most frequent first.
"""

from __future__ import annotations

import re

import pandas as pd

from torch_nsight.analyze.frames import own
from torch_nsight.vocabulary import JOIN_KEYS

__all__ = ["name_aten_ops", "kernel_family", "ATEN_OPS_COLUMN"]

ATEN_OPS_COLUMN = "aten_ops"

#: (family, kernel-name pattern, aten-op pattern), tried in order.
FAMILIES: tuple[tuple[str, re.Pattern[str], re.Pattern[str]], ...] = tuple(
    (family, re.compile(kernel, re.IGNORECASE), re.compile(op))
    for family, kernel, op in (
        ("attention", r"sdpa|fmha|flash|attention|attn", r"attention|sdpa"),
        ("conv", r"conv|dgrad|wgrad|fprop|implicit.*gemm|nchwToNhwc|nhwcToNchw",
         r"conv"),
        ("gemm", r"gemm|nvjet|cutlass|cublas|xmma", r"^(addmm|mm|bmm|baddbmm|matmul|linear|"
         r"_scaled_mm|addbmm|_grouped_mm|_scaled_grouped_mm)"),
        ("cat", r"CatArrayBatchedCopy", r"^(cat|stack)"),
        ("norm", r"layer_norm|rms_norm|batch_norm|group_norm", r"norm"),
        ("softmax", r"softmax", r"softmax"),
        ("embedding", r"indexSelect|index_select|embedding", r"embedding|index_select"),
        ("reduce", r"reduce_kernel|reduction", r"^(sum|mean|var|std|amax|amin|max|min|"
         r"norm|argmax|argmin|prod|all|any|logsumexp)"),
        ("copy", r"copy|transpose", r"copy|^to$|^clone|contiguous|^_to_copy"),
        ("elementwise", r"elementwise|unrolled|vectorized", r"."),
    ))
_CLAIMED = re.compile("|".join(f"(?:{op.pattern})" for family, _, op in FAMILIES
                               if family not in ("elementwise", "reduce", "copy")))


def kernel_family(kernel: object) -> str | None:
    """The op family a kernel name belongs to (``gemm``, ``cat``, ``elementwise``, ...)."""
    if not isinstance(kernel, str):
        return None
    return next((family for family, pattern, _ in FAMILIES if pattern.search(kernel)), None)


def _ops_of(counts: list[tuple[str, float]], family: str | None) -> str | None:
    """The ops of one module (``(aten_op, calls)``, most calls first) that kernels of
    ``family`` run."""
    if not counts:
        return None
    if len(counts) == 1:
        return counts[0][0]
    pattern = next((op for name, _, op in FAMILIES if name == family), None)
    if pattern is None:
        return None
    names = [name for name, _ in counts if pattern.search(name)]
    if family == "elementwise":  # what the other families do not claim
        names = [name for name in names if not _CLAIMED.search(name)]
    return ", ".join(names) or None


def name_aten_ops(df: pd.DataFrame, calls: pd.DataFrame | None) -> pd.DataFrame:
    """Add ``aten_ops``: the aten op(s) of each kernel's module and direction that kernels
    of its family run (see the module docstring); None without a calls table or a match.

    Args:
        df: an attributed kernel table (the join keys :data:`JOIN_KEYS` and ``kernel``).
        calls: the attributed calls table (``aten_op``, ``count`` and the join keys).

    Returns:
        A copy with ``aten_ops``.
    """
    out = own(df)
    out[ATEN_OPS_COLUMN] = pd.Series([None] * len(out), index=out.index, dtype=object)
    if calls is None or calls.empty or "aten_op" not in calls or out.empty:
        return out
    keys = [k for k in JOIN_KEYS if k in calls and k in out]
    work = calls.assign(count=calls.get("count", 1))
    totals = work.groupby([*(work[k].astype(object).fillna("") for k in keys), "aten_op"],
                          sort=False)["count"].sum()
    by_module: dict[tuple[object, ...], list[tuple[str, float]]] = {}
    for (*key, op), count in totals.items():
        by_module.setdefault(tuple(key), []).append((str(op), count))
    for counts in by_module.values():  # most calls first, ties in the order first called
        counts.sort(key=lambda pair: -pair[1])
    kernel_keys = out[keys].astype(object).fillna("")
    families = out["kernel"].map(kernel_family)
    memo: dict[tuple[object, ...], str | None] = {}
    names = []
    for key, family in zip(map(tuple, kernel_keys.to_numpy()), families, strict=True):
        cache_key = (*key, family)
        if cache_key not in memo:
            memo[cache_key] = _ops_of(by_module.get(key, []), family)
        names.append(memo[cache_key])
    out[ATEN_OPS_COLUMN] = pd.Series(names, index=out.index, dtype=object)
    return out
