"""The FLOPs of each compiled kernel, from what Inductor knows at compile time.

Each kernel Inductor generates or calls fused some FX nodes of the post-grad graph
(:func:`torch_nsight.capture.compiled.inductor.track_compiles` sees them when the kernel is named),
and each node's ``meta['val']`` holds the fake tensors of its output; its inputs are the
``meta['val']`` of its argument nodes. Their FLOPs are counted as
:class:`torch.utils.flop_counter.FlopCounterMode` counts an eager op: the same registry of
formulas (``2 M N K`` for a GEMM, convolution, the attention kernels), called with the same
arguments. Nodes the registry does not know (elementwise ops, reductions, views) count 0:
their kernels are placed by the bytes they move.

One node's FLOPs go to one launch: a node is in the origins of every kernel that reads or
writes its value, so a GEMM node may also be an origin of the Triton kernel that fused its
bias or epilogue. Its FLOPs go to the extern kernel that holds it (``extern_kernels.mm``,
an SDPA fallback), else to a Triton template kernel (``triton_tem_*``: a GEMM Inductor
generated), else to the first launch that holds it (a GEMM Inductor decomposed into
elementwise work).

Per launch record (the JSON comment of :mod:`torch_nsight.capture.compiled.inductor`) this module
adds ``"f": [[node, FLOPs, operand dtype], ...]`` (the FLOP-bearing nodes only) and
``"x"`` (1 for an extern kernel); :func:`launch_flops` resolves a graph's records into
(FLOPs, operand dtype) per launch.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from typing import Any

from torch_nsight.capture.calls.op_flops import op_flops
from torch_nsight.vocabulary import operand_dtype

logger = logging.getLogger(__name__)

__all__ = ["node_flops", "flop_nodes", "launch_flops"]

_TEMPLATE = "_tem_"


def _value(argument: Any) -> Any:
    """The fake value an FX node argument stands for (other arguments as they are)."""
    meta = getattr(argument, "meta", None)
    if isinstance(meta, dict) and hasattr(argument, "op"):
        return meta.get("val")
    return argument


def _dtype_names(values: Iterable[Any]) -> list[str]:
    return [str(v.dtype).removeprefix("torch.") for v in values if hasattr(v, "dtype")
            and hasattr(v, "shape")]


def node_flops(node: Any) -> tuple[int, str] | None:
    """(FLOPs, operand dtype) of one post-grad FX node, counted by FlopCounterMode's
    registry on its fake tensors; None for a node the registry does not know, or whose
    values were not recorded."""
    from torch.utils._pytree import tree_flatten, tree_map

    packet = getattr(getattr(node, "target", None), "overloadpacket", None)
    if packet is None or "val" not in getattr(node, "meta", {}):
        return None
    args, kwargs = tree_map(_value, (tuple(node.args), dict(node.kwargs)))
    flops = op_flops(packet, args, kwargs, node.meta["val"])
    if flops is None:
        return None
    inputs, _ = tree_flatten((args, kwargs))
    return flops, operand_dtype(_dtype_names(inputs))


def flop_nodes(nodes: Iterable[Any]) -> list[list[Any]]:
    """``[[node name, FLOPs, operand dtype], ...]`` of the FLOP-bearing ``nodes`` (each
    once; a node whose FLOPs cannot be counted is logged and left out)."""
    found: dict[str, list[Any]] = {}
    for node in nodes:
        name = str(getattr(node, "name", ""))
        if not name or name in found:
            continue
        try:
            counted = node_flops(node)
        except Exception as err:  # noqa: BLE001 - a formula that refuses these values
            logger.debug("FLOPs of compiled node %s not counted: %s: %s", name,
                         type(err).__name__, err)
            continue
        if counted is not None and counted[0] > 0:
            found[name] = [name, counted[0], counted[1]]
    return list(found.values())


def _rank(record: dict[str, Any]) -> int:
    """Which launch takes a node several launches hold (lowest first)."""
    if record.get("x"):
        return 0
    return 1 if _TEMPLATE in str(record.get("k", "")) else 2


def launch_flops(records: Sequence[dict[str, Any]]) -> list[tuple[float, str] | None]:
    """(FLOPs, operand dtype of its largest node) per launch record of one graph, each
    FLOP-bearing node counted at one launch (see the module docstring); None per record
    when the records carry no FLOPs (a map written before they were recorded)."""
    if not any("f" in record for record in records):
        return [None] * len(records)
    owner: dict[str, tuple[int, int]] = {}  # node -> (rank, launch)
    for index, record in enumerate(records):
        for name, _, _ in record.get("f") or ():
            rank = _rank(record)
            if name not in owner or rank < owner[name][0]:
                owner[name] = (rank, index)
    out: list[tuple[float, str] | None] = []
    for index, record in enumerate(records):
        mine = [(float(flops), str(dtype)) for name, flops, dtype in record.get("f") or ()
                if owner[name][1] == index]
        total = float(sum(flops for flops, _ in mine))
        dtype = max(mine)[1] if mine else ""
        out.append((total, dtype))
    return out
