"""The kernel map of a compiled graph: its launches in order (:class:`CompiledGraph`), and the
document carried into the report for the calls made for one instrumented root
(:func:`graph_map`): per launch, the kernel and the range messages its module would have had
in eager mode, which the report stage (:mod:`torch_nsight.report.compiled_attribution`) joins to the
kernels inside the graph's range.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from torch_nsight import formats
from torch_nsight.naming import backward_message, compiled_message

__all__ = ["MAP_FORMAT", "CompiledGraph", "graph_map"]

MAP_FORMAT = 2  # 2: each launch carries its FLOPs and their operand dtype


@dataclass(frozen=True)
class CompiledGraph:
    """The launches of one compiled graph, in the order its wrapper code makes them.

    Attributes:
        key: its name in range messages (``g0``, ``g1``, ... in the order first called).
        launches: (kernel name, module paths relative to the compiled root) per launch.
        backward: whether it is a backward graph.
        flops: (FLOPs, operand dtype) per launch, in the order of ``launches``; empty when
            its records carry none.
    """

    key: str
    launches: tuple[tuple[str, tuple[str, ...]], ...]
    backward: bool
    flops: tuple[tuple[float, str] | None, ...] = ()

    @property
    def modules(self) -> frozenset[str]:
        """Every module path its launches came from."""
        return frozenset(m for _, modules in self.launches for m in modules)


def _ancestors(name: str, names: frozenset[str]) -> list[str]:
    """The instrumented modules from the root down to ``name`` (qualified names)."""
    parts = name.split(".") if name else []
    chain = [".".join(parts[:i]) for i in range(len(parts) + 1)]
    return [n for n in chain if n in names]


def _owner(path: str, names: frozenset[str]) -> str | None:
    """The deepest instrumented module that is ``path`` or contains it."""
    found = _ancestors(path, names)
    return found[-1] if found else None


def _common(paths: Sequence[str]) -> str:
    split = [p.split(".") if p else [] for p in paths]
    common: list[str] = []
    for parts in zip(*split, strict=False):
        if len(set(parts)) != 1:
            break
        common.append(parts[0])
    return ".".join(common)


def graph_map(graph: CompiledGraph, root: str, names: Sequence[str],
              messages: dict[str, str]) -> dict[str, Any]:
    """The document carried for the calls of ``graph`` made for instrumented module
    ``root``: per launch, the kernel, the range messages its module would have had in eager
    mode (outermost first), the modules it fused when more than one, and (when recorded)
    its FLOPs and their operand dtype.

    A launch fused across modules gets their deepest common instrumented ancestor.
    """
    known = frozenset(names)
    launches = []
    for index, (kernel, relative) in enumerate(graph.launches):
        full = [".".join(p for p in (root, rel) if p) for rel in relative] or [root]
        owned = sorted({o for o in (_owner(p, known) for p in full) if o is not None})
        module = _common(owned) if owned else (_owner(root, known) or "")
        chain = [messages.get(n, n) for n in _ancestors(module, known)]
        if graph.backward:
            chain = [backward_message(m) for m in chain]
        launch: list[Any] = [kernel, chain, owned if len(owned) > 1 else []]
        counted = graph.flops[index] if index < len(graph.flops) else None
        if counted is not None:
            launch.extend(counted)
        launches.append(launch)
    return {"kind": formats.COMPILED_MAP_KIND, "format": MAP_FORMAT,
            "range": compiled_message(graph.key, root), "launches": launches}
