"""Compile time: what Inductor knows of each kernel it generates, written into the graph's
wrapper code and read back from it.

For each kernel, Inductor hands its provenance hook the scheduler nodes it fused; each FX
node names its module (``nn_module_stack``, ``fwd_nn_module_stack`` for the nodes of a
backward graph). :func:`launch_record` turns them into one record (kernel, module paths
relative to the compiled root, backward flag, extern flag, the FLOPs of the nodes:
:mod:`torch_nsight.capture.compiled.flops`), which the hooks of
:mod:`torch_nsight.capture.compiled.inductor` write as a comment after the launch's provenance line::

    # [torch_nsight] {"k": "triton_per_fused_native_layer_norm_0", "m": ["blocks.0.norm1"], "b": 0}

:func:`parse_graph_source` reads them back, in launch order, from
``CompiledFxGraph.source_code`` (also for a graph loaded from the cache).
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Sequence
from typing import Any

from torch_nsight.capture.compiled.flops import flop_nodes

__all__ = ["MARK", "module_path", "launch_record", "parse_graph_source"]

MARK = "[torch_nsight]"

_ROOT_TOKENS = ("L", "G")


def module_path(text: str) -> str:
    """A dotted module path from the path Dynamo writes into ``nn_module_stack``.

    ``"L['self'].blocks[0].attn"``, ``"L['self']._modules['blocks']._modules['0'].attn"`` and
    ``"getattr(L['self'].blocks, '0').attn"`` all read ``"blocks.0.attn"`` (relative to the
    compiled root). The hops through :func:`~torch_nsight.instrument`'s wrappers
    (``L['self'].blocks.0.forward.__self__.module().attn``: a module's ``forward`` is its
    wrapper's bound ``__call__``; ``.forward.module()`` where it was the wrapper itself, and
    ``L['self'].module()`` where the wrapper's frame was compiled) are dropped.
    """
    text = re.sub(r"(\.forward(\.__self__)?)?\.module\(\)", "", text)
    previous = None
    while previous != text:
        previous = text
        text = re.sub(r"getattr\(([^(),]*),\s*['\"]([^'\"]*)['\"]\)", r"\1.\2", text)
    text = re.sub(r"\._modules\[['\"]([^'\"]+)['\"]\]", r".\1", text)
    text = re.sub(r"\[['\"]?([^'\"\]]+)['\"]?\]", r".\1", text)
    parts = [part for part in text.split(".") if part]
    if parts and parts[0] in _ROOT_TOKENS:
        parts = parts[2:]
    elif parts and parts[0] == "self":
        parts = parts[1:]
    return ".".join(parts)


def _node_module(node: Any) -> tuple[str | None, bool]:
    """(module path, whether the node belongs to a backward graph) of one FX node."""
    meta = getattr(node, "meta", None) or {}
    backward = meta.get("partitioner_tag") == "is_backward"
    stack = meta.get("nn_module_stack")
    if not stack:
        stack = meta.get("fwd_nn_module_stack")
        backward = backward or bool(stack)
    if not stack:
        return None, backward
    value = list(stack.values())[-1]
    return module_path(str(value[0] if isinstance(value, tuple) else value)), backward


def _origin_nodes(node_schedule: Any, is_extern: bool) -> list[Any]:
    if is_extern:
        origin = getattr(node_schedule, "origin_node", None)
        return [origin] if origin is not None else list(getattr(node_schedule, "origins", ()))
    nodes: list[Any] = []
    for snode in node_schedule if isinstance(node_schedule, Sequence) else ():
        parts = snode.get_nodes() if hasattr(snode, "get_nodes") else [snode]
        for part in parts:
            ir_node = getattr(part, "node", None)
            nodes.extend(getattr(ir_node, "origins", ()) or ())
    return nodes


def _lowering_is_backward() -> bool | None:
    """Whether the graph Inductor lowers now is a backward graph (None: it does not say)."""
    try:
        from torch._inductor.virtualized import V

        value = getattr(V.graph, "is_backward", None)
    except Exception:  # noqa: BLE001 - no graph being lowered, or another Inductor
        return None
    return value if isinstance(value, bool) else None


def launch_record(kernel: str, node_schedule: Any, is_extern: bool) -> dict[str, Any]:
    modules: set[str] = set()
    backward = False
    nodes = _origin_nodes(node_schedule, is_extern)
    for node in nodes:
        path, is_backward = _node_module(node)
        backward = backward or is_backward
        if path is not None:
            modules.add(path)
    graph_backward = _lowering_is_backward()  # the nodes' tags vary between torch versions
    if graph_backward is not None:
        backward = graph_backward
    return {"k": kernel, "m": sorted(modules), "b": int(backward), "x": int(is_extern),
            "f": flop_nodes(nodes)}


def parse_graph_source(source: str) -> list[dict[str, Any]]:
    """The launch records :func:`track_compiles` wrote into a graph's wrapper code, in order."""
    records = []
    for line in source.splitlines():
        _, mark, rest = line.partition(MARK)
        if mark:
            with contextlib.suppress(ValueError):
                record = json.loads(rest)
                if isinstance(record, dict) and "k" in record:
                    records.append(record)
    return records
