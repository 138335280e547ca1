"""FLOPs of the ops torch's FLOP registry has no formula for, from their shapes alone.

``torch.utils.flop_counter`` (torch 2.11-2.13) counts ``mm``, ``bmm``, convolutions and
attention, but not ``_grouped_mm``: the grouped GEMM a mixture of experts runs its experts
with (``F.grouped_mm``, Hugging Face's Mixtral-style ``experts``). Without a count its kernels
sat on the roofline with no FLOPs and got no finding. The capture stage counts it here when it
records a call; the report stage fills the count into calls tables recorded before (their
shapes are kept). Plain Python: no torch, no pandas.

``_grouped_mm(self, mat2, offs)``, by the operands' ranks (``offs`` splits the ragged
dimension into groups):

======== ======== ============ =====================================
self     mat2     out          multiply-adds
======== ======== ============ =====================================
(M, K)   (G, K, N) (M, N)      M K N (each row in one group)
(G, M, K) (K, N)  (M, N)       M K N (each column in one group)
(M, K)   (K, N)   (G, M, N)    M K N (K split into groups)
(G, M, K) (G, K, N) (G, M, N)  G M K N
======== ======== ============ =====================================

A FLOP is half a multiply-add, as the registry counts. Rows past the last offset are counted
too (an upper bound where the groups do not cover the whole operand).
"""

from __future__ import annotations

from collections.abc import Sequence
from math import prod

__all__ = ["GROUPED_GEMM_OPS", "shape_flops"]

#: The grouped GEMMs counted here (``_scaled_grouped_mm`` is the fp8 one, same shapes).
GROUPED_GEMM_OPS = frozenset({"_grouped_mm", "_scaled_grouped_mm"})


def _grouped_mm(a: Sequence[int], b: Sequence[int]) -> int | None:
    if len(a) == 2 and len(b) == 3:
        return 2 * a[0] * a[1] * b[2]
    if len(a) == 3 and len(b) == 2:
        return 2 * a[1] * a[2] * b[1]
    if len(a) == 2 and len(b) == 2:
        return 2 * a[0] * a[1] * b[1]
    if len(a) == 3 and len(b) == 3:
        return 2 * prod(a) * b[2]
    return None


def shape_flops(op: str, input_shapes: Sequence[Sequence[int]]) -> int | None:
    """FLOPs of one call of aten op ``op`` (its name without overload) on inputs of
    ``input_shapes``; None for an op not counted here or shapes it does not cover."""
    if op in GROUPED_GEMM_OPS and len(input_shapes) >= 2:
        return _grouped_mm(list(input_shapes[0]), list(input_shapes[1]))
    return None
