"""Run time: the range of each call of a compiled graph, and its kernel map carried once.

Each call runs inside one push/pop range ``compiled:<graph>@<root>``
(:func:`torch_nsight.naming.compiled_message`); its first call, which runs Triton's
autotuning (every candidate configuration launched and timed), inside ``warmup`` instead,
so those launches are not attributed. ``<root>`` is the instrumented module whose
``forward`` called it (the ``self`` of the nearest calling Python frame that is an
instrumented module); a backward graph, which autograd calls with no module frame, takes
the root of the latest forward call over the same modules not yet taken (backward graphs
run in the reverse order of their forwards). The kernel map
(:func:`~torch_nsight.capture.compiled.kernel_map.graph_map`) of each (graph, root) is carried
into the report (:mod:`torch_nsight.capture.calls.embed`) at its first call, and again at its
first call inside a measured step.
"""

from __future__ import annotations

import re
import sys
import weakref
from types import FrameType
from typing import Any

from torch_nsight import formats
from torch_nsight.capture.compiled.flops import launch_flops
from torch_nsight.capture.compiled.kernel_map import CompiledGraph, graph_map
from torch_nsight.capture.compiled.records import parse_graph_source
from torch_nsight.capture.compiled.tracker import TRACKER
from torch_nsight.naming import WARMUP_MESSAGE, compiled_message

__all__ = ["enter_graph"]


def _graph_of(compiled: Any) -> CompiledGraph | None:
    """The kernel map of ``compiled`` read from its wrapper code (once per graph), or None
    when it carries none."""
    tracker = TRACKER
    key = id(compiled)
    known = tracker.owners.get(key)
    if known is not None and known() is compiled:
        return tracker.graphs[key]
    source = getattr(compiled, "source_code", None) or ""
    records = parse_graph_source(source)
    graph = None
    if records:
        graph = CompiledGraph(key=f"g{len(tracker.graphs)}",
                              launches=tuple((r["k"], tuple(r.get("m") or ())) for r in records),
                              backward=any(r.get("b") for r in records),
                              flops=tuple(launch_flops(records)))
    elif _LAUNCH.search(source):  # a graph that launches nothing (views only) needs no map
        tracker.warn_once("a compiled graph carries no kernel map (compiled before "
                          "instrument(), or loaded from a cache written without it): its "
                          "kernels stay unattributed; instrument the model before its first "
                          "call, or clear the cache (TORCHINDUCTOR_FORCE_DISABLE_CACHES=1)")
    tracker.owners[key] = weakref.ref(compiled)
    tracker.graphs[key] = graph
    return graph


#: What a kernel launch looks like in Inductor's wrapper code: a Triton kernel's ``.run(``,
#: an extern kernel (``extern_kernels.mm(``), a C++ kernel (``cpp_fused_...(``), or the
#: provenance line Inductor writes before each launch.
_LAUNCH = re.compile(r"\.run\(|\bextern_kernels\.|\bcpp_fused_\w*\(|Provenance debug handles")


def _caller_module() -> tuple[Any, str] | None:
    """(instrumentation, qualified name) of the nearest instrumented module on the Python
    stack (the ``self`` of a frame), else None."""
    from torch_nsight.capture.ranges.registry import instrumented_name

    frame: FrameType | None = sys._getframe(2)
    for _ in range(128):
        if frame is None:
            return None
        if "self" in frame.f_code.co_varnames[:1]:
            found = instrumented_name(frame.f_locals.get("self"))
            if found is not None:
                return found
        frame = frame.f_back
    return None


def enter_graph(compiled: Any) -> tuple[Any, str] | None:
    """The emitter and range message of one call of ``compiled`` (carrying its map when
    due), or None when it is not attributed."""
    from torch_nsight.capture.ranges.registry import active_instrumentations

    handles = [h for h in active_instrumentations() if h.emitter is not None]
    if not handles:
        return None  # tracked, nothing instrumented now (a bare timing)
    tracker = TRACKER
    tracker.called = True
    graph = _graph_of(compiled)
    if graph is None:
        return None
    owner: tuple[Any, str] | None = None
    if graph.backward:
        modules = graph.modules
        for index in range(len(tracker.forwards) - 1, -1, -1):
            forward_modules, handle, root = tracker.forwards[index]
            if forward_modules & modules or not modules:
                del tracker.forwards[index]
                owner = (handle, root)
                break
    else:
        owner = _caller_module()
        if owner is not None:
            tracker.forwards.append((graph.modules, owner[0], owner[1]))
    if owner is None:
        owner = (handles[0], "")
    handle, root = owner
    if not handle.active or handle.emitter is None:
        return None
    message = compiled_message(graph.key, root)
    if id(compiled) not in tracker.warmed:
        # its first call runs Triton's autotuning (each candidate config launched and
        # timed): kernels that are not the graph's launches, so they are not attributed
        tracker.warmed.add(id(compiled))
        return handle.emitter, WARMUP_MESSAGE
    inside = tracker.window > 0
    if (message, inside) not in tracker.carried:
        tracker.carried.add((message, inside))
        _carry(handle, graph_map(graph, root, handle.names, handle.messages))
    return handle.emitter, message


def _carry(handle: Any, document: dict[str, Any]) -> None:
    """Put ``document`` where the report will find it (never raises)."""
    try:
        message = formats.pack_message(formats.COMPILED_MAP_PREFIX, document)
        from torch_nsight.capture.ranges.emitter import RecordFunctionEmitter, RecordingEmitter

        if isinstance(handle.emitter, (RecordFunctionEmitter, RecordingEmitter)):
            handle.emitter.push(message)  # the timeline's profiler, or a test: one range
            handle.emitter.pop()
        else:  # NVTX: a start/end range around a kernel, which ncu keeps
            from torch_nsight.capture.calls.embed import carry_message

            carry_message(message, f"the kernel map of {document['range']}")
    except Exception as err:  # noqa: BLE001 - never into the user's step
        TRACKER.warn_once(f"could not carry a compiled graph's kernel map: "
                          f"{type(err).__name__}: {err}")
