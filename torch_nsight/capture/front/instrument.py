"""``instrument(model)``: an NVTX range around every submodule's forward and backward.

How the ranges are put on:

* Each instrumented module gets an instance attribute ``forward`` (removed again by
  :meth:`Instrumentation.remove`) that opens its range around the original
  forward; no module hook is registered. The range covers the module's forward
  itself, not the forward hooks other tools registered on it.
* Backward ranges come from autograd node pre-hooks set, when gradients are
  enabled, on the nodes that produce a module call's outputs (open) and inputs
  (close); no tensor is wrapped, so in-place ops on inputs and outputs
  (``nn.ReLU(inplace=True)``, ``out += identity``) work as without instrumentation.
  Tensors in the inputs count when passed directly, positionally or by keyword.
* A backward range also closes when the backward range of a module call outside it
  opens: this closes the ranges of modules none of whose inputs needs a gradient
  (the root, an embedding), the rest when the backward pass ends; on a CUDA device
  thread, whose backward ends elsewhere, they stay open until that thread opens
  its next range.
* Under ``torch.compile`` the compiled program is the user's program: Dynamo compiles
  the frames it compiles without torch_nsight, never a wrapper (no graph break,
  recompile or eager fallback of its own: :mod:`torch_nsight.capture.ranges.compiling`).
  Inside a traced region the wrappers stand aside; a module called eagerly around
  compiled code (the one where compiling starts, one called after a graph break) keeps
  its ranges. Each call of a compiled graph gets one range, and its kernels their
  modules when the report is read (see :mod:`torch_nsight.capture.compiled.inductor`):
  instrument before the model's first compiled call. The calls table is recorded as
  for an eager model, less the ops of Inductor's graphs (their kernel maps carry their
  FLOPs).
* ``torch.save(model)`` and ``copy.deepcopy(model)`` work; in the copies
  ``forward`` is the plain bound method (an instance attribute): they are not
  instrumented.

Under ``torch-nsight profile --verify`` (:attr:`~torch_nsight.environment.ScriptEnv.fixes`), the
fixes it asks for are applied to the model first, also when nothing is installed (see
:mod:`torch_nsight.capture.fixes.switches`): a fix that fails is logged and reported to the
command, the model left as it was.
"""

from __future__ import annotations

import atexit
import logging
import os
import warnings
import weakref
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Literal

from torch import nn

from torch_nsight.capture.compiled.inductor import (
    compiled_refusal,
    track_compiles,
    untrack_compiles,
    unwrap_compiled,
)
from torch_nsight.capture.ranges import registry
from torch_nsight.capture.ranges.detect import resolve_enabled, under_nsight_compute
from torch_nsight.capture.ranges.emitter import NvtxEmitter, RangeEmitter
from torch_nsight.capture.ranges.frames import Range
from torch_nsight.capture.ranges.hooks import NODE_HOOKS, InstrumentedForward, install_forward
from torch_nsight.capture.ranges.ops import OpNamer, check_ops, is_torch_leaf, qualified_class
from torch_nsight.capture.ranges.optimizers import watch_optimizer_steps
from torch_nsight.capture.ranges.outside import unwatch_outside_calls, watch_outside_calls
from torch_nsight.capture.ranges.registry import active_instrumentations
from torch_nsight.capture.ranges.selection import Selector, check_selectors, select_modules
from torch_nsight.capture.ranges.stack import STACK, RangeStack
from torch_nsight.capture.replicas.op_calls import op_replicas_for
from torch_nsight.environment import APPLY_ENV, ScriptEnv
from torch_nsight.naming import backward_message, op_message

logger = logging.getLogger(__name__)

__all__ = ["Instrumentation", "instrument", "active_instrumentations"]


class Instrumentation:
    """Handle on the hooks :func:`instrument` installed; also a context manager.

    ``with instrument(model): ...`` removes the hooks on leaving the block; otherwise call
    :meth:`remove`. A handle for which nothing was installed (profiler not attached, model
    already instrumented) has ``active`` False and ``reason`` saying why.

    Attributes:
        active: Whether hooks are installed now.
        reason: Why hooks were, or were not, installed.
        names: Qualified names of the instrumented modules (``""`` is the root), in
            ``named_modules()`` order.
        messages: Forward range message of each instrumented module, by qualified name.
        ops: The op names that get ranges, or None without op ranges.
        backward: Whether backward ranges are installed.
    """

    def __init__(self, model: nn.Module | None, reason: str) -> None:
        self.active = False
        self.reason = reason
        self.names: tuple[str, ...] = ()
        self.messages: dict[str, str] = {}
        self.ops: frozenset[str] | None = None
        self.backward = False
        self._model = weakref.ref(model) if model is not None else None
        self._wrappers: list[tuple[weakref.ref[nn.Module], InstrumentedForward]] = []
        self._stack: RangeStack = STACK
        #: Where this handle's ranges go (None when inactive); compiled graphs use it too.
        self.emitter: RangeEmitter | None = None
        #: Where the optimizer step's range goes: the whole chain, the calls recorder
        #: included (its ops filed under the step's row, none named as outside the ranges).
        self.step_sink: RangeEmitter | None = None
        self._tracks_compiles = False
        # (CallRecorder, file or None, CallsCarrier or None) while a calls table is recorded
        self._calls: tuple[Any, Path | None, Any] | None = None
        #: Under ``torch-nsight profile``: the ScriptReplication that torch_nsight.step()
        #: drives (identical siblings profiled once), else None.
        self.replication: Any = None

    def install(self, model: nn.Module, selected: list[tuple[str, nn.Module]], *,
                emitter: RangeEmitter | None, record_calls: object,
                op_names: frozenset[str] | None, backward: bool) -> None:
        """Put ranges on ``selected`` (name, module) of ``model`` and become active: the
        emitter chain (replication markers, the calls recorder), one wrapper per module,
        the registry, the optimizer's step range and the ranges of the training loop's calls
        outside the model (:mod:`~torch_nsight.capture.ranges.outside`). On failure nothing stays
        installed."""
        sink = self._emitter_chain(model, emitter, record_calls)
        self.step_sink = sink

        def make_range(message: str, name: str, *, is_module: bool = True,
                       names_ops: bool = True) -> Range:
            return Range(message, name, sink, self, is_module=is_module, names_ops=names_ops)

        namer = None
        if op_names is not None:
            namer = OpNamer(op_names,
                            lambda op: make_range(op_message(op), op, is_module=False), STACK)
        try:
            for name, module in selected:
                message = name if name else type(module).__name__
                forward = make_range(message, name, names_ops=not is_torch_leaf(module))
                back = make_range(backward_message(message), name) if backward else None
                wrapper = install_forward(module, forward, back, namer)
                self._wrappers.append((weakref.ref(module), wrapper))
                registry.add_module(self, module, name)
        except BaseException:
            self.active = True
            self.remove()
            raise
        self.active = True
        self.names = tuple(name for name, _ in selected)
        self.messages = {name: name if name else type(module).__name__
                         for name, module in selected}
        # each call's module class goes into the calls table (a sweep's recorder is the
        # emitter it passes)
        recorder = self._calls[0] if self._calls is not None else sink
        classes = getattr(recorder, "module_classes", None)
        if isinstance(classes, dict):
            classes.update({self.messages[name]: qualified_class(module)
                            for name, module in selected})
        self.ops = op_names
        self.backward = backward
        self._tracks_compiles = track_compiles()
        registry.activate(self)
        if emitter is None:  # a test's own emitter sees only its model's ranges
            watch_optimizer_steps(registry.step_emitter)
            watch_outside_calls(self, sink)  # through the calls recorder: the calls join

    def _emitter_chain(self, model: nn.Module, emitter: RangeEmitter | None,
                       record_calls: object) -> RangeEmitter:
        """Where the ranges go: ``emitter`` (default NVTX), behind the replication markers
        under ``profile`` and the calls recorder when the calls table is recorded or carried
        into the report; sets :attr:`emitter` (what compiled graphs' ranges use)."""
        sink: RangeEmitter = emitter if emitter is not None else default_emitter()
        if emitter is None and replication_requested():
            from torch_nsight.capture.replicas.replica import ReplicaMarkers, ScriptReplication

            markers = ReplicaMarkers(sink)
            self.replication = ScriptReplication(model, markers)
            sink = markers
        self.emitter = sink  # compiled graphs' ranges skip the calls recorder
        path = (None if record_calls is None or record_calls is False
                else Path(record_calls))  # type: ignore[arg-type]
        carry = record_calls is not False and emitter is None and under_nsight_compute()
        if path is not None or carry:
            from torch_nsight.capture.calls.embed import CallsCarrier
            from torch_nsight.capture.calls.recorder import CallRecorder

            script = ScriptEnv.from_env(os.environ)
            per_step = carry and script.steps is not None
            sink = CallRecorder(sink, first_iteration=not per_step,
                                on_done=lambda _recorder: self._finish_calls(),
                                refuse=lambda: compiled_refusal(model), name_outside=carry)
            if per_step and script.replicate_ops:
                sink.op_replicas = op_replicas_for(self.replication, active_instrumentations())
            self._calls = (sink, path, CallsCarrier(sink, per_step=per_step,
                                                    at_last=script.carry_last) if carry else None)
            atexit.register(self._finish_calls)  # a script that never removes the handle
        return sink

    def remove(self) -> None:
        """Restore every module's ``forward`` as it was before :func:`instrument`.

        Safe to call more than once. The autograd hooks this handle set on graphs that
        still exist are detached, so a backward run afterwards on a graph built before
        opens no range. Ranges of this handle still open on the calling thread are closed;
        ranges open on other threads are left to them.
        """
        if not self.active:
            return
        self.active = False
        self.reason = "removed"
        for ref, wrapper in self._wrappers:
            module = ref()
            if module is None:
                continue
            wrapper.remove(module)
            registry.drop_module(self, module)
        self._wrappers.clear()
        if self._tracks_compiles:
            self._tracks_compiles = False
            untrack_compiles()
        self._finish_calls()
        unwatch_outside_calls(self)
        detached = NODE_HOOKS.detach(self)
        registry.deactivate(self)
        closed = self._stack.close_owned(self)
        if closed:
            logger.warning("torch_nsight: remove() closed %d range(s) still open on this "
                           "thread (remove() was called inside a forward or backward?)", closed)
        logger.debug("torch_nsight: removed instrumentation of %d modules (%d autograd hooks "
                     "detached)", len(self.names), detached)

    @property
    def calls_recorder(self) -> Any:
        """The :class:`~torch_nsight.capture.calls.recorder.CallRecorder` while a calls table is
        recorded, or None."""
        return self._calls[0] if self._calls is not None else None

    @property
    def carrier(self) -> Any:
        """The :class:`~torch_nsight.capture.calls.embed.CallsCarrier` that puts the calls table
        into the report under Nsight Compute, or None."""
        return self._calls[2] if self._calls is not None else None

    def _finish_calls(self) -> None:
        """Write the calls table to its file and carry it into the report, as asked (once;
        never raises)."""
        if self._calls is None:
            return
        recorder, path, carrier = self._calls
        self._calls = None
        atexit.unregister(self._finish_calls)  # do not keep this handle alive until exit
        if carrier is not None:
            carrier.step_ended()
        recorder.close()
        if carrier is not None:
            carrier.carry()
        if path is None:
            return
        try:
            recorder.write(path)
            logger.info("torch_nsight: wrote the calls table %s", path)
        except OSError as err:
            logger.warning("torch_nsight: could not write the calls table %s: %s", path, err)

    def __enter__(self) -> Instrumentation:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.remove()

    def __repr__(self) -> str:
        model = self._model() if self._model is not None else None
        target = type(model).__name__ if model is not None else "no model"
        state = f"{len(self.names)} modules" if self.active else f"inactive: {self.reason}"
        return f"<Instrumentation of {target}, {state}>"


def _checked_model(model: object) -> nn.Module:
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    return model


def _check_options(depth: object, include: object, exclude: object, ops: object,
                   backward: object, emitter: object, record_calls: object
                   ) -> tuple[tuple[Selector, ...] | None, tuple[Selector, ...] | None,
                              frozenset[str] | None]:
    """:func:`instrument`'s arguments checked: the selectors and the op names.

    Raises:
        TypeError, ValueError: an argument is invalid (its name is in the message).
    """
    if depth is not None and (isinstance(depth, bool) or not isinstance(depth, int)):
        raise TypeError(f"depth must be an int or None, got {type(depth).__name__}")
    if depth is not None and depth < 0:
        raise ValueError(f"depth must be >= 0 (the root is depth 0), got {depth}")
    include_ = check_selectors(include, "include")
    exclude_ = check_selectors(exclude, "exclude")
    op_names = check_ops(ops)
    if not isinstance(backward, bool):
        raise TypeError(f"backward must be a bool, got {type(backward).__name__}")
    if emitter is not None and not isinstance(emitter, RangeEmitter):
        raise TypeError("emitter must have push(message) and pop() methods, got "
                        f"{type(emitter).__name__}")
    if record_calls is not None and record_calls is not False \
            and not isinstance(record_calls, (str, os.PathLike)):
        raise TypeError(f"record_calls must be a file path (str or os.PathLike), False or None, "
                        f"got {type(record_calls).__name__}")
    return include_, exclude_, op_names


def replication_requested(environ: Mapping[str, str] | None = None) -> bool:
    """Whether ``torch-nsight profile`` asked for identical siblings to be profiled once
    (:attr:`~torch_nsight.environment.ScriptEnv.replicate`, with chosen steps, under Nsight
    Compute)."""
    env = os.environ if environ is None else environ
    script = ScriptEnv.from_env(env)
    return script.replicate and script.steps is not None and under_nsight_compute(env)


def default_emitter() -> RangeEmitter:
    """NVTX ranges, or PyTorch profiler ranges under ``torch-nsight profile --timeline``."""
    if ScriptEnv.from_env(os.environ).timeline is not None:
        from torch_nsight.capture.ranges.emitter import RecordFunctionEmitter

        return RecordFunctionEmitter()
    return NvtxEmitter()


def _apply_requested_fixes(model: nn.Module) -> None:
    """Under ``torch-nsight profile --verify``, apply the fixes it asks for (before any
    hook)."""
    script = ScriptEnv.from_env(os.environ)
    if script.fixes or script.refusal(APPLY_ENV) is not None:
        from torch_nsight.capture.fixes.switches import apply_requested_fixes

        apply_requested_fixes(model)


def _declined(model: nn.Module, on: bool, reason: str, record_calls: object
              ) -> Instrumentation | None:
    """The inactive handle :func:`instrument` returns when it installs nothing (not
    enabled, or ``model`` already instrumented: with a warning), else None."""
    if not on:
        logger.info("torch_nsight: not instrumenting %s: %s", type(model).__name__, reason)
        if record_calls:
            logger.info("torch_nsight: not recording the calls table %s either (instrument() "
                        "is off: pass enabled=True to record it without a profiler)",
                        record_calls)
        return Instrumentation(model, reason)
    owner = registry.owner(model)
    if owner is not None:
        reason = f"{type(model).__name__} is already instrumented by {owner!r}"
        warnings.warn(f"torch_nsight: {reason}; not instrumenting it again (remove() the "
                      "first instrumentation to change its options)",
                      stacklevel=3)  # instrument()'s caller
        return Instrumentation(model, reason)
    return None


def _unclaimed(selected: list[tuple[str, nn.Module]]) -> list[tuple[str, nn.Module]]:
    """``selected`` without the modules another instrumentation holds (with a warning)."""
    taken = [name for name, module in selected if registry.owner(module) is not None]
    if taken:
        warnings.warn(f"torch_nsight: {len(taken)} submodule(s) are already instrumented by "
                      f"another instrumentation and keep its ranges: {taken[:5]}",
                      stacklevel=3)  # instrument()'s caller
        selected = [(name, module) for name, module in selected
                    if registry.owner(module) is None]
    return selected


def instrument(
    model: nn.Module,
    *,
    depth: int | None = None,
    include: Selector | Iterable[Selector] | None = None,
    exclude: Selector | Iterable[Selector] | None = None,
    ops: bool | str | Iterable[str] = False,
    backward: bool = True,
    enabled: bool | None = None,
    emitter: RangeEmitter | None = None,
    record_calls: str | os.PathLike[str] | Literal[False] | None = None,
) -> Instrumentation:
    """Put an NVTX push/pop range around the forward and backward of every submodule.

    Ranges are in the NVTX domain :data:`torch_nsight.naming.DOMAIN`. A module's forward
    range is named by its qualified name as in ``model.named_modules()``
    (``layers.0.mlp.down_proj``; the root module by its class name); its backward range by
    :func:`torch_nsight.naming.backward_message` of that name (``bwd:layers.0.mlp``), on
    the thread that runs backward. With ``ops``, functional ops called inside a forward get
    ranges named by :func:`torch_nsight.naming.op_message` (``op:silu``).

    By default nothing is installed unless a profiler is attached (see
    :func:`torch_nsight.capture.resolve_enabled`), so the call can stay in training code.

    Args:
        model: The module to instrument.
        depth: Deepest module level to instrument (root 0, its children 1, ...); None for
            all levels.
        include: Instrument only modules matching one of these fnmatch globs on the
            qualified name (the root's is ``""``) or module types.
        exclude: Do not instrument modules matching one of these globs or types. Applies to
            each module on its own: exclude ``"layers.*"`` to skip a whole subtree.
        ops: True to name the ops of :data:`torch_nsight.capture.DEFAULT_OPS`, or the op
            names to use (``{"silu", "mul"}``); False for none.
        backward: Whether to add backward ranges.
        enabled: True or False to install or not regardless of the environment; None to
            install only when ``TORCH_NSIGHT_INSTRUMENT=1`` is set or a profiler is
            detected (``TORCH_NSIGHT_INSTRUMENT=0`` forces off).
        emitter: Receiver of the push/pop events (default: an :class:`NvtxEmitter`); tests
            pass a :class:`~torch_nsight.capture.RecordingEmitter`.
        record_calls: Also record the calls table of the first iteration (the model's first
            forward and the backward after it: every aten op with its module, shapes,
            dtypes, FLOPs and bytes) and write it to this file (``run.calls.json`` beside
            ``run.ncu-rep`` is read with the report by :func:`torch_nsight.load`) as soon as
            the model's forward is called again, else when the handle is removed or the
            process exits. Recording costs a dispatch mode on that one iteration only;
            nothing when not enabled. Under Nsight Compute the table is recorded without
            this argument and carried inside the report (see :mod:`torch_nsight.capture.calls.embed`:
            over the first step chosen by ``torch-nsight profile --steps``, else over the
            first iteration, the file then written when the instrumentation is removed or
            the process exits); False records nothing.

    Returns:
        The :class:`Instrumentation` handle. Instrumenting a model that is already
        instrumented installs nothing and returns an inactive handle, with a warning.

    Raises:
        TypeError: If ``model`` is not an ``nn.Module`` or an option has the wrong type.
        ValueError: If ``depth`` is negative or an op name is empty.

    How the ranges are put on (forward wrappers, autograd node hooks, ``torch.compile``,
    copies of the model) and ``--verify``'s fixes: see :mod:`torch_nsight.capture.front.instrument`.
    """
    model = unwrap_compiled(_checked_model(model))  # torch.compile(model): its modules
    include_, exclude_, op_names = _check_options(depth, include, exclude, ops, backward,
                                                  emitter, record_calls)
    _apply_requested_fixes(model)
    on, reason = resolve_enabled(enabled)
    declined = _declined(model, on, reason, record_calls)
    if declined is not None:
        return declined
    selected = _unclaimed(select_modules(model, depth, include_, exclude_))
    handle = Instrumentation(model, reason)
    handle.install(model, selected, emitter=emitter, record_calls=record_calls,
                   op_names=op_names, backward=backward)
    logger.info("torch_nsight: instrumented %d modules of %s (%s)", len(selected),
                type(model).__name__, reason)
    return handle
