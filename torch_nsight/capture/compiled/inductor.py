"""Compiled code keeps its modules: the kernels of ``torch.compile`` graphs attributed to the
modules they came from, forward and backward.

Inside a compiled region the forward wrappers of :func:`~torch_nsight.instrument` stand
aside (a range pushed from traced code would break the graph; Dynamo never compiles the
wrappers themselves: :mod:`torch_nsight.capture.ranges.compiling`), so the region's kernels ran
outside every module range. Three parts give them their modules back:

* **Compile time.** Inductor knows, for each kernel it generates, the FX nodes it fused,
  and each node its module (``nn_module_stack``, or ``fwd_nn_module_stack`` for the nodes
  of a backward graph). :func:`track_compiles` turns on Inductor's provenance tracking
  (``torch._inductor.config.trace.provenance_tracking_level = 1``, part of Inductor's cache
  key, so graphs cached by plain runs are not reused) and writes one comment after each
  launch's ``[Provenance debug handles]`` line of the generated wrapper code::

      # [torch_nsight] {"k": "triton_per_fused_native_layer_norm_0", "m": ["blocks.0.norm1"], "b": 0}

  (kernel, module paths relative to the compiled root, backward flag; with the FLOPs of
  the nodes it fused: :mod:`torch_nsight.capture.compiled.flops`). The launches are
  then in order in ``CompiledFxGraph.source_code``, also for a graph loaded from the cache
  (:mod:`torch_nsight.capture.compiled.records`).
* **Run time.** Each call of a compiled graph runs inside one push/pop range
  ``compiled:<graph>@<root>`` (:func:`torch_nsight.naming.compiled_message`); its first
  call, which runs Triton's autotuning (every candidate configuration launched and timed),
  inside ``warmup`` instead, so those launches are not attributed. ``<root>`` is
  the instrumented module whose ``forward`` called it (the ``self`` of the nearest calling
  Python frame that is an instrumented module); a backward graph, which autograd calls
  with no module frame, takes the root of the latest forward call over the same modules not
  yet taken (backward graphs run in the reverse order of their forwards)
  (:mod:`torch_nsight.capture.compiled.ranges`).
* **In the report.** The launches of each (graph, root) — kernel name, the range messages
  of its module and the module's instrumented ancestors, the modules it fused, the FLOPs
  it does — are carried into the report like the calls table
  (:mod:`torch_nsight.capture.calls.embed`): once at the first call, once at the first call
  inside a measured step (:mod:`torch_nsight.capture.compiled.kernel_map`). The report stage
  (:mod:`torch_nsight.report.compiled_attribution`) joins them to the kernels inside the range.

This module turns tracking on and off (:func:`track_compiles`, measured windows), installs
the hooks into Inductor, and says whether a model runs compiled; the process's tracking
state is :data:`torch_nsight.capture.compiled.tracker.TRACKER`.

What this costs: nothing without an active instrumentation (the graph's call checks one
flag); with one, a walk up the Python stack per compiled graph call and a range. While the
calls table is recorded, an Inductor graph's call is not (its kernels take their FLOPs from
the kernel map; the ops the model runs eagerly are recorded).
What a torch without these Inductor hooks cannot give is said once, in a warning.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import sys
from collections.abc import Iterator
from typing import Any

from torch_nsight.capture.compiled.kernel_map import MAP_FORMAT
from torch_nsight.capture.compiled.ranges import enter_graph
from torch_nsight.capture.compiled.records import MARK, launch_record
from torch_nsight.capture.compiled.tracker import TRACKER

logger = logging.getLogger(__name__)

__all__ = ["track_compiles", "untrack_compiles", "compiled_support", "measured_window",
           "open_window", "close_window", "is_compiled", "runs_compiled", "tracking_compiles",
           "unwrap_compiled", "compiled_graphs_seen", "compiled_refusal"]


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

    tracker = TRACKER
    trace = debug.set_kernel_post_grad_provenance_tracing

    def trace_kernel(node_schedule: Any, kernel_name: str, *args: Any, **kwargs: Any) -> Any:
        handle = trace(node_schedule, kernel_name, *args, **kwargs)
        is_extern = bool(kwargs.get("is_extern", args[0] if args else False))
        try:
            tracker.pending[kernel_name] = launch_record(kernel_name, node_schedule, is_extern)
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
            entered = enter_graph(self)
        except Exception as err:  # noqa: BLE001 - never into the user's step
            tracker.warn_once(f"compiled graph not attributed: {type(err).__name__}: {err}")
            entered = None
        with _calls_paused():  # the kernel map gives this graph's kernels their FLOPs
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


@contextlib.contextmanager
def _calls_paused() -> Iterator[None]:
    """The calls recorders recording now record nothing inside the block (an Inductor
    graph's call: its ops would be counted twice, in the calls table and the kernel map)."""
    from torch_nsight.capture.ranges.registry import active_instrumentations

    recorders = [recorder for handle in active_instrumentations()
                 if (recorder := handle.calls_recorder) is not None and recorder.is_recording]
    if not recorders:
        yield
        return
    with contextlib.ExitStack() as paused:
        for recorder in recorders:
            paused.enter_context(recorder.paused())
        yield


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
    return is_compiled(model) or TRACKER.called or TRACKER.compile_requested


def compiled_refusal(model: Any) -> str | None:
    """Why no dispatch mode may record ``model``'s calls now, or None.

    The calls recorder's mode tells Dynamo to ignore it (``ignore_compile_internals``):
    Dynamo then compiles and runs compiled code with it on the stack, and the model stays
    compiled. A torch without that runs a frame it first meets under a dispatch mode
    eagerly from then on (its compiled graph is not called again), so a compiled model's
    calls are not recorded there."""
    if _dynamo_ignores_the_recorder():
        return None
    if is_compiled(model) or compiled_graphs_seen():
        return ("the model runs compiled (a dispatch mode would make it run eagerly from "
                "then on); no FLOPs from the calls table")
    return None


def _dynamo_ignores_the_recorder() -> bool:
    """Whether this torch lets a dispatch mode stand aside from ``torch.compile``."""
    from torch.utils._python_dispatch import TorchDispatchMode

    return hasattr(TorchDispatchMode, "ignore_compile_internals")


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
                return f"torch_nsight.kernel_map.{MAP_FORMAT}"
            theirs = inner.uuid() if hasattr(inner, "uuid") else None
            # a pass without a uuid turns Inductor's cache off: keep it so
            return None if theirs is None else (f"torch_nsight.kernel_map.{MAP_FORMAT}",
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
    tracker = TRACKER
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
    tracker = TRACKER
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
        if TRACKER.users:
            TRACKER.compile_requested = True
        if TRACKER.users and not TRACKER.engaged:
            with TRACKER.lock:
                if TRACKER.users and not TRACKER.engaged:
                    _engage()
        return compile_(*args, **kwargs)

    compile_tracked._torch_nsight_waits = True  # type: ignore[attr-defined]
    torch.compile = compile_tracked


def untrack_compiles() -> None:
    """One instrumentation less (see :func:`track_compiles`); the last restores Inductor's
    provenance setting."""
    tracker = TRACKER
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
    TRACKER.window += 1


def close_window() -> None:
    """The measured step or iteration opened by :func:`open_window` ends."""
    TRACKER.window = max(0, TRACKER.window - 1)


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
    return TRACKER.called


