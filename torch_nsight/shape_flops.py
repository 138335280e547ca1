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

cuDNN's recurrent layers (``_cudnn_rnn``: ``nn.LSTM``, ``nn.GRU``, ``nn.RNN`` on a GPU) are
not counted either: their gates run as GEMMs, whose time then sat on no roofline. Their
inputs are the input (tokens x features, or 3-D), the weights of each layer and direction
(``w_ih``, ``w_hh``, then the biases and an LSTM's projection ``w_hr``), cuDNN's flat weight
buffer and the hidden state ``hx`` (layers x directions, batch, hidden). Every token goes
through each layer's input and hidden GEMMs: ``2 x tokens x`` the sum of their weights'
sizes. The backward (``_cudnn_rnn_backward``) runs the input and the weight gradients:
twice that. The gates' elementwise work is not counted.
"""

from __future__ import annotations

from collections.abc import Sequence
from math import prod

__all__ = ["GROUPED_GEMM_OPS", "RNN_OPS", "shape_flops"]

#: The grouped GEMMs counted here (``_scaled_grouped_mm`` is the fp8 one, same shapes).
GROUPED_GEMM_OPS = frozenset({"_grouped_mm", "_scaled_grouped_mm"})
#: cuDNN's recurrent layers, forward and backward (the backward twice the forward's GEMMs).
RNN_OPS = {"_cudnn_rnn": 1, "_cudnn_rnn_backward": 2}


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


def _rnn(shapes: Sequence[Sequence[int]]) -> int | None:
    """The forward GEMM FLOPs of ``_cudnn_rnn`` from its inputs' shapes (module docstring);
    None where they do not read as its inputs."""
    if len(shapes) < 4 or len(shapes[0]) not in (2, 3):
        return None
    at_hx = next((i for i in range(1, len(shapes)) if len(shapes[i]) == 3), None)
    if at_hx is None or not shapes[at_hx][0] or not shapes[at_hx][-1]:
        return None
    weights = [prod(shape) for shape in shapes[1:at_hx]]
    if len(weights) > 1 and weights[-1] == sum(weights[:-1]):
        weights = weights[:-1]  # cuDNN's flat buffer holds the others
    groups = shapes[at_hx][0]  # layers x directions, each with its own weights
    if not weights or len(weights) % groups:
        return None
    per = len(weights) // groups
    # w_ih, w_hh[, b_ih, b_hh][, w_hr]: the matrices are the first two and a projection
    matrix_at = {2: (0, 1), 3: (0, 1, 2), 4: (0, 1), 5: (0, 1, 4)}.get(per)
    if matrix_at is None:
        return None
    gates_hidden = weights[1] // shapes[at_hx][-1]  # w_hh: (gates x hidden, hidden or proj)
    if not gates_hidden or weights[0] % gates_hidden:
        return None
    features = weights[0] // gates_hidden
    if not features or prod(shapes[0]) % features:
        return None
    tokens = prod(shapes[0]) // features
    matrices = [w for g in range(groups) for i, w in enumerate(weights[g * per:(g + 1) * per])
                if i in matrix_at]
    return 2 * tokens * sum(matrices)


def shape_flops(op: str, input_shapes: Sequence[Sequence[int]]) -> int | None:
    """FLOPs of one call of aten op ``op`` (its name without overload) on inputs of
    ``input_shapes`` (a list argument's tensors in its place, one by one); None for an op not
    counted here or shapes it does not cover."""
    if op in GROUPED_GEMM_OPS and len(input_shapes) >= 2:
        return _grouped_mm(list(input_shapes[0]), list(input_shapes[1]))
    if op in RNN_OPS:
        forward = _rnn(input_shapes)
        return None if forward is None else RNN_OPS[op] * forward
    return None
