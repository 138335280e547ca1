"""Compiled code keeps its modules: the kernels of ``torch.compile`` graphs attributed to the
modules they came from, forward and backward.

Inside a compiled region the forward wrappers of :func:`~torch_nsight.instrument` stand
aside (a range pushed from traced code would break the graph), so the region's kernels ran
outside every module range. Three parts give them their modules back:

* **Compile time.** Inductor knows, for each kernel it generates, the FX nodes it fused,
  and each node its module (``nn_module_stack``, or ``fwd_nn_module_stack`` for the nodes
  of a backward graph). :func:`track_compiles` turns on Inductor's provenance tracking
  (``torch._inductor.config.trace.provenance_tracking_level = 1``, part of Inductor's cache
  key, so graphs cached by plain runs are not reused) and writes one comment after each
  launch's ``[Provenance debug handles]`` line of the generated wrapper code::

      # [torch_nsight] {"k": "triton_per_fused_native_layer_norm_0", "m": ["blocks.0.norm1"], "b": 0}

  (kernel, module paths relative to the compiled root, backward flag; with the FLOPs of
  the nodes it fused: :mod:`torch_nsight.capture.compiled_flops`). The launches are
  then in order in ``CompiledFxGraph.source_code``, also for a graph loaded from the cache.
* **Run time.** Each call of a compiled graph runs inside one push/pop range
  ``compiled:<graph>@<root>`` (:func:`torch_nsight.naming.compiled_message`); its first
  call, which runs Triton's autotuning (every candidate configuration launched and timed),
  inside ``warmup`` instead, so those launches are not attributed. ``<root>`` is
  the instrumented module whose ``forward`` called it (the ``self`` of the nearest calling
  Python frame that is an instrumented module); a backward graph, which autograd calls
  with no module frame, takes the root of the latest forward call over the same modules not
  yet taken (backward graphs run in the reverse order of their forwards).
* **In the report.** The launches of each (graph, root) — kernel name, the range messages
  of its module and the module's instrumented ancestors, the modules it fused, the FLOPs
  it does — are carried into the report like the calls table
  (:mod:`torch_nsight.capture.embed`): once at the first call, once at the first call
  inside a measured step. The report stage
  (:mod:`torch_nsight.report.compiled`) joins them to the kernels inside the range.

What this costs: nothing without an active instrumentation (the graph's call checks one
flag); with one, a walk up the Python stack per compiled graph call and a range.
What a torch without these Inductor hooks cannot give is said once, in a warning.
"""

from __future__ import annotations

import collections
import contextlib
import functools
import json
import logging
import re
import sys
import threading
import weakref
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from types import FrameType
from typing import Any

from torch_nsight import formats
from torch_nsight.capture.compiled_flops import flop_nodes, launch_flops
from torch_nsight.naming import WARMUP_MESSAGE, backward_message, compiled_message

logger = logging.getLogger(__name__)

__all__ = ["track_compiles", "untrack_compiles", "compiled_support", "measured_window",
           "open_window", "close_window", "is_compiled", "runs_compiled", "tracking_compiles", "unwrap_compiled", "compiled_graphs_seen", "compiled_refusal",
           "module_path", "CompiledGraph", "graph_map"]

MARK = "[torch_nsight]"
_MAP_FORMAT = 2  # 2: each launch carries its FLOPs and their operand dtype


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


_ROOT_TOKENS = ("L", "G")


def module_path(text: str) -> str:
    """A dotted module path from the path Dynamo writes into ``nn_module_stack``.

    ``"L['self'].blocks[0].attn"``, ``"L['self']._modules['blocks']._modules['0'].attn"`` and
    ``"getattr(L['self'].blocks, '0').attn"`` all read ``"blocks.0.attn"`` (relative to the
    compiled root). The hops through :func:`~torch_nsight.instrument`'s wrappers
    (``L['self'].module().blocks.0.forward.module().attn``) are dropped.
    """
    text = re.sub(r"(\.forward)?\.module\(\)", "", text)
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


def _launch_record(kernel: str, node_schedule: Any, is_extern: bool) -> dict[str, Any]:
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


class _Tracker:
    """The installed Inductor hooks and the run-time state (one per process)."""

    def __init__(self) -> None:
        self.installed = False
        self.engaged = False  # Inductor's settings switched on for the users
        self.users = 0
        self.previous_level: int | None = None
        self.previous_pass: Any = None
        self.pending: dict[str, dict[str, Any]] = {}
        self.graphs: dict[int, CompiledGraph | None] = {}  # id(CompiledFxGraph) -> graph
        self.owners: dict[int, weakref.ref[Any]] = {}  # the object behind each id above
        self.forwards: collections.deque[tuple[frozenset[str], Any, str]] = (
            collections.deque(maxlen=4096))
        self.carried: set[tuple[str, bool]] = set()
        self.window = 0
        self.called = False  # a compiled graph ran since the first instrumentation
        self.compile_requested = False  # torch.compile was called while compiles were tracked
        self.warmed: set[int] = set()  # ids of the graphs called once (their first call warms)
        self.lock = threading.Lock()
        self.warned: set[str] = set()

    def warn_once(self, text: str) -> None:
        if text not in self.warned:
            self.warned.add(text)
            logger.warning("torch_nsight: %s", text)


_TRACKER = _Tracker()


def compiled_support() -> str | None:
    """None when this torch lets :func:`track_compiles` map compiled kernels to modules,
    else what is missing (checked by capability, not by version)."""
    try:
        import torch._inductor.config as config
        import torch._inductor.debug as debug
        from torch._inductor.codegen.wrapper import PythonWrapperCodegen
        from torch._inductor.output_code import CompiledFxGraph
    except Exception as err:  # noqa: BLE001 - any import failure means "not supported"
        return f"its Inductor cannot be imported ({type(err).__name__}: {err})"
    missing = [name for name, present in (
        ("torch._inductor.config.trace.provenance_tracking_level",
         hasattr(config.trace, "provenance_tracking_level")),
        ("torch._inductor.debug.set_kernel_post_grad_provenance_tracing",
         hasattr(debug, "set_kernel_post_grad_provenance_tracing")),
        ("PythonWrapperCodegen.write_provenance_debug_handle",
         hasattr(PythonWrapperCodegen, "write_provenance_debug_handle")),
        ("CompiledFxGraph.__call__", "__call__" in vars(CompiledFxGraph)),
        ("torch._inductor.config.post_grad_custom_post_pass",
         hasattr(config, "post_grad_custom_post_pass")),
        ("torch._inductor.custom_graph_pass", _importable("torch._inductor.custom_graph_pass")),
    ) if not present]
    return f"it lacks {', '.join(missing)}" if missing else None


def _importable(name: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(name) is not None


def _install() -> None:
    """Wrap Inductor's kernel naming, wrapper comment writing and graph call (once)."""
    import torch._inductor.debug as debug
    from torch._inductor.codegen.wrapper import PythonWrapperCodegen
    from torch._inductor.output_code import CompiledFxGraph

    tracker = _TRACKER
    trace = debug.set_kernel_post_grad_provenance_tracing

    def trace_kernel(node_schedule: Any, kernel_name: str, *args: Any, **kwargs: Any) -> Any:
        handle = trace(node_schedule, kernel_name, *args, **kwargs)
        is_extern = bool(kwargs.get("is_extern", args[0] if args else False))
        try:
            tracker.pending[kernel_name] = _launch_record(kernel_name, node_schedule, is_extern)
        except Exception as err:  # noqa: BLE001 - never into the compiler
            tracker.warn_once(f"could not read the modules of compiled kernel {kernel_name}: "
                              f"{type(err).__name__}: {err}")
        return handle

    for module in list(sys.modules.values()):
        if (getattr(module, "__name__", "") or "").startswith("torch._inductor") and \
                getattr(module, "set_kernel_post_grad_provenance_tracing", None) is trace:
            module.set_kernel_post_grad_provenance_tracing = trace_kernel  # type: ignore

    write = PythonWrapperCodegen.write_provenance_debug_handle

    def write_handle(self: Any, kernel_name: str, debug_handle: Any, *args: Any,
                     **kwargs: Any) -> Any:
        result = write(self, kernel_name, debug_handle, *args, **kwargs)
        record = tracker.pending.pop(kernel_name, None)
        if record is not None and debug_handle is not None:
            self.writeline(f"{getattr(self, 'comment', '#')} {MARK} {json.dumps(record)}")
        return result

    PythonWrapperCodegen.write_provenance_debug_handle = write_handle  # type: ignore

    call = CompiledFxGraph.__call__

    def call_graph(self: Any, inputs: Any) -> Any:
        if not tracker.users:
            return call(self, inputs)
        try:
            entered = _enter(self)
        except Exception as err:  # noqa: BLE001 - never into the user's step
            tracker.warn_once(f"compiled graph not attributed: {type(err).__name__}: {err}")
            entered = None
        if entered is None:
            return call(self, inputs)
        emitter, message = entered
        emitter.push(message)
        try:
            return call(self, inputs)
        finally:
            emitter.pop()

    CompiledFxGraph.__call__ = call_graph  # type: ignore[method-assign]
    tracker.installed = True


def is_compiled(model: Any) -> bool:
    """Whether ``model`` is ``torch.compile``'d, or holds a module compiled in place
    (``module.compile()``)."""
    if hasattr(model, "_orig_mod"):
        return True
    modules = model.modules() if hasattr(model, "modules") else ()
    return any(getattr(m, "_compiled_call_impl", None) is not None for m in modules)


def runs_compiled(model: Any) -> bool:
    """Whether ``model`` is, or may be, running ``torch.compile`` graphs: it is compiled
    (:func:`is_compiled`), or, while an instrumentation is active, a compiled graph ran or
    ``torch.compile`` was called (on a parent that wraps it, which the instrumentation
    cannot see)."""
    return is_compiled(model) or _TRACKER.called or _TRACKER.compile_requested


def compiled_refusal(model: Any) -> str | None:
    """Why no dispatch mode may record ``model``'s calls now, or None: a compiled model,
    once run under a ``TorchDispatchMode``, keeps running eagerly (seen on torch 2.13: its
    compiled graph is not called again), so its calls are never recorded."""
    if is_compiled(model) or compiled_graphs_seen():
        return ("the model runs compiled (a dispatch mode would make it run eagerly from "
                "then on); no FLOPs from the calls table")
    return None


def unwrap_compiled(model: Any) -> Any:
    """The module ``torch.compile(module)`` wrapped (the model itself otherwise)."""
    while type(model).__name__ == "OptimizedModule" and hasattr(model, "_orig_mod"):
        model = model._orig_mod
    return model


def _keyed_pass(inner: Any) -> Any:
    """A post-grad pass that runs ``inner`` (the user's, or none) and adds this module's
    format to Inductor's cache key, so graphs cached without the kernel map are not reused."""
    from torch._inductor.custom_graph_pass import CustomGraphPass

    class KernelMapKey(CustomGraphPass):
        def __call__(self, graph: Any) -> None:
            if inner is not None:
                inner(graph)

        def uuid(self) -> Any:
            if inner is None:
                return f"torch_nsight.kernel_map.{_MAP_FORMAT}"
            theirs = inner.uuid() if hasattr(inner, "uuid") else None
            # a pass without a uuid turns Inductor's cache off: keep it so
            return None if theirs is None else (f"torch_nsight.kernel_map.{_MAP_FORMAT}",
                                                 theirs)

    return KernelMapKey()


def track_compiles() -> bool:
    """Attribute the kernels of graphs compiled from now on (see the module docstring).

    Called by :func:`~torch_nsight.instrument` for each active instrumentation; undone by
    :func:`untrack_compiles` when the last one is removed. Inductor is not imported for a
    model that is never compiled (it costs seconds): until Inductor is loaded, the hooks
    wait in :func:`torch.compile` (which ``module.compile()`` calls too).

    Returns:
        Whether compiled kernels will be attributed (False, with one warning, when this
        torch lacks what it takes).
    """
    tracker = _TRACKER
    with tracker.lock:
        tracker.users += 1
        _wait_in_torch_compile()  # also notes that torch.compile was called
        if "torch._inductor.config" not in sys.modules:
            return True
        if _engage():
            return True
        tracker.users -= 1
        return False


def _engage() -> bool:
    """Install the hooks (once) and switch Inductor's settings on for the active users
    (lock held). False when this torch lacks what it takes."""
    tracker = _TRACKER
    if not tracker.installed:
        why = compiled_support()
        if why is not None:
            tracker.warn_once(f"kernels of torch.compile regions stay unattributed: this "
                              f"torch cannot map them to modules ({why})")
            return False
        _install()
    if tracker.users and not tracker.engaged:
        import torch._inductor.config as config

        if config.trace.provenance_tracking_level == 0:
            tracker.previous_level = 0
            config.trace.provenance_tracking_level = 1
        tracker.previous_pass = config.post_grad_custom_post_pass
        config.post_grad_custom_post_pass = _keyed_pass(tracker.previous_pass)
        tracker.engaged = True
    return True


def _wait_in_torch_compile() -> None:
    """Wrap :func:`torch.compile` (once) so that its first call while compiles are tracked
    installs the hooks before anything compiles."""
    import torch

    if getattr(torch.compile, "_torch_nsight_waits", False):
        return
    compile_ = torch.compile

    @functools.wraps(compile_)
    def compile_tracked(*args: Any, **kwargs: Any) -> Any:
        if _TRACKER.users:
            _TRACKER.compile_requested = True
        if _TRACKER.users and not _TRACKER.engaged:
            with _TRACKER.lock:
                if _TRACKER.users and not _TRACKER.engaged:
                    _engage()
        return compile_(*args, **kwargs)

    compile_tracked._torch_nsight_waits = True  # type: ignore[attr-defined]
    torch.compile = compile_tracked


def untrack_compiles() -> None:
    """One instrumentation less (see :func:`track_compiles`); the last restores Inductor's
    provenance setting."""
    tracker = _TRACKER
    with tracker.lock:
        if tracker.users == 0:
            return
        tracker.users -= 1
        if tracker.users == 0:
            tracker.called = False
            tracker.compile_requested = False
            tracker.forwards.clear()
            if not tracker.engaged:
                return
            import torch._inductor.config as config

            if tracker.previous_level is not None:
                config.trace.provenance_tracking_level = tracker.previous_level
                tracker.previous_level = None
            config.post_grad_custom_post_pass = tracker.previous_pass
            tracker.previous_pass = None
            tracker.engaged = False


def open_window() -> None:
    """A measured step or sweep iteration starts: graph maps not yet carried inside one
    are carried again at their next call (ncu profiles only the kernels of measured
    ranges). Pair with :func:`close_window`."""
    _TRACKER.window += 1


def close_window() -> None:
    """The measured step or iteration opened by :func:`open_window` ends."""
    _TRACKER.window = max(0, _TRACKER.window - 1)


@contextlib.contextmanager
def tracking_compiles() -> Iterator[bool]:
    """:func:`track_compiles` ... :func:`untrack_compiles` around a block, for a model that
    compiles before it is instrumented (a warm-up timed without ranges)."""
    tracked = track_compiles()
    try:
        yield tracked
    finally:
        if tracked:
            untrack_compiles()


@contextlib.contextmanager
def measured_window() -> Iterator[None]:
    """:func:`open_window` ... :func:`close_window` around a block."""
    open_window()
    try:
        yield
    finally:
        close_window()


def compiled_graphs_seen() -> bool:
    """Whether a compiled graph ran while an instrumentation was active."""
    return _TRACKER.called


def _graph_of(compiled: Any) -> CompiledGraph | None:
    tracker = _TRACKER
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
    from torch_nsight.capture.registry import instrumented_name

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


def _enter(compiled: Any) -> tuple[Any, str] | None:
    """The emitter and range message of one call of ``compiled`` (carrying its map when
    due), or None when it is not attributed."""
    from torch_nsight.capture.registry import active_instrumentations

    handles = [h for h in active_instrumentations() if h.emitter is not None]
    if not handles:
        return None  # tracked, nothing instrumented now (a bare timing)
    tracker = _TRACKER
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
    return {"kind": formats.COMPILED_MAP_KIND, "format": _MAP_FORMAT,
            "range": compiled_message(graph.key, root), "launches": launches}


def _carry(handle: Any, document: dict[str, Any]) -> None:
    """Put ``document`` where the report will find it (never raises)."""
    try:
        message = formats.pack_message(formats.COMPILED_MAP_PREFIX, document)
        from torch_nsight.capture.emitter import RecordFunctionEmitter, RecordingEmitter

        if isinstance(handle.emitter, (RecordFunctionEmitter, RecordingEmitter)):
            handle.emitter.push(message)  # the timeline's profiler, or a test: one range
            handle.emitter.pop()
        else:  # NVTX: a start/end range around a kernel, which ncu keeps
            from torch_nsight.capture.embed import carry_message

            carry_message(message, f"the kernel map of {document['range']}")
    except Exception as err:  # noqa: BLE001 - never into the user's step
        _TRACKER.warn_once(f"could not carry a compiled graph's kernel map: "
                           f"{type(err).__name__}: {err}")
