"""Profile one of each group of identical sibling modules and copy its rows to the others.

Deep models repeat identical blocks. In a sweep's child, per shape (and under ``torch-nsight
profile``, on the step before the chosen ones: :class:`~torch_nsight.capture.replicas.replica.ScriptReplication`):

1. :func:`candidate_groups`: children of one parent with the same type, parameter and
   buffer shapes and submodule structure (static, no run needed);
2. :func:`check_siblings`: one un-profiled iteration records, per candidate, its calls,
   input shapes and its *launches*: the torch-level functions it calls forward, in order,
   with their arguments' and outputs' shapes, strides, dtypes and ``requires_grad`` (in
   eager mode these decide which kernels launch; :mod:`torch_nsight.capture.replicas.launches`), for
   backward the ``requires_grad`` pattern of its inputs and parameters (which decides the
   backward graph autograd builds for it) and its backward hook calls, and its time (CUDA
   events). Members whose launches match form a verified group, whatever their Python
   attributes (a stochastic-depth rate that reaches ``bernoulli_`` as another float launches
   the same kernel); the first is its representative, and a member that differs is
   profiled, with a note naming its first differing launch. (CUDA kernel
   names would need CUPTI tracing, which Nsight Compute's own injection rules out in the
   profiled child, so the calls that launch them are compared instead. The calls are
   recorded with a ``TorchFunctionMode``, not a ``TorchDispatchMode``: entering the first
   dispatch mode imports ``torch._dynamo``, a second or more of start-up in the child.)
3. :class:`~torch_nsight.capture.replicas.replica.ReplicaMarkers`: during the measured iterations, each non-representative member
   runs inside a start/end NVTX range ``replica`` (domain ``torch_nsight``), forward and
   backward, opened and closed with the member's own module ranges (it is the emitter the
   model is instrumented with; no module hook changes the autograd graph), and ``ncu --nvtx-exclude torch_nsight@replica`` leaves its kernels and those of
   its submodules out. Start/end ranges are not tied to a thread, so the backward kernels
   autograd launches from its own thread are covered too; and the ``ncu`` command stays
   the same whatever the check decides (a mismatch simply opens no ``replica`` range).

When the sweep is loaded, :func:`torch_nsight.analyze.expand_replicas` copies the representative's kernel rows to every
replica (module names rewritten) with a ``replicated_from`` column, so every kernel of the
model still has a row.
"""

from __future__ import annotations

import contextlib
import logging
import sys
import threading
import time
import warnings
from collections.abc import Callable, Iterable
from typing import Any, cast

import torch
from torch import nn

from torch_nsight.capture.ranges.compiling import is_compiling
from torch_nsight.capture.replicas.launches import (
    Launch,
    Member,
    describe_mismatch,
    function_name,
    launches_nothing,
    requires_grad_pattern,
)
from torch_nsight.capture.replicas.launches import signature as _arg_signature
from torch_nsight.naming import is_inside

logger = logging.getLogger(__name__)



def _static_signature(module: nn.Module) -> tuple[Any, ...]:
    cls = type(module)
    return (cls.__module__, cls.__qualname__,
            tuple((n, tuple(p.shape), str(p.dtype), p.requires_grad)
                  for n, p in module.named_parameters()),
            tuple((n, tuple(b.shape), str(b.dtype)) for n, b in module.named_buffers()),
            tuple((n, type(m).__qualname__) for n, m in module.named_modules()),
            module.training)


def candidate_groups(model: nn.Module) -> list[list[str]]:
    """Children of one parent that look identical before running (type, parameter and
    buffer shapes, submodule structure). Groups of two or more, in module order."""
    groups: list[list[str]] = []
    for parent_name, parent in model.named_modules():
        by_signature: dict[tuple[Any, ...], list[str]] = {}
        for child_name, child in parent.named_children():
            full = f"{parent_name}.{child_name}" if parent_name else child_name
            by_signature.setdefault(_static_signature(child), []).append(full)
        groups.extend(names for names in by_signature.values() if len(names) > 1)
    return groups


class _Recorder:
    """Hooks and a torch function mode that record what each candidate member does."""

    def __init__(self, model: nn.Module, names: Iterable[str], *, backward: bool,
                 cuda: bool) -> None:
        self.modules = dict(model.named_modules())
        self.members = {name: Member() for name in names}
        self.backward = backward
        self.cuda = cuda
        self.local = threading.local()
        self.handles: list[Any] = []
        self.failed: str | None = None  # why recording stopped (an internal error)

    def fail(self, err: BaseException) -> None:
        """Stop recording after an internal error (said once): the check then replicates
        nothing, and the user's step goes on."""
        if self.failed is None:
            self.failed = f"{type(err).__name__}: {err}"
            logger.warning("torch_nsight: the sibling check stopped (%s): every module is "
                           "profiled", self.failed)

    def _quiet(self) -> bool:
        """Whether to record nothing now: Dynamo is tracing (the hooks must add nothing to a
        graph), or recording stopped."""
        return self.failed is not None or is_compiling()

    def _stack(self) -> list[tuple[str, str, Any]]:
        if not hasattr(self.local, "stack"):
            self.local.stack = []
        return self.local.stack

    def _open(self, name: str, direction: str) -> None:
        start: torch.cuda.Event | float
        if self.cuda:
            start = torch.cuda.Event(enable_timing=True)
            start.record()
        else:
            start = time.perf_counter()
        self._stack().append((name, direction, start))

    def _close(self, name: str, direction: str) -> None:
        stack = self._stack()
        if not stack or stack[-1][:2] != (name, direction):
            return
        _, _, start = stack.pop()
        member = self.members[name]
        if self.cuda:
            end = torch.cuda.Event(enable_timing=True)
            end.record()
            member.events.append((start, end))
        else:
            member.seconds += time.perf_counter() - start

    def install(self) -> None:
        for name in self.members:
            module = self.modules[name]

            def pre(mod: Any, args: Any, kwargs: Any, name: str = name) -> None:
                if self._quiet():
                    return
                try:
                    member = self.members[name]
                    member.calls += 1
                    member.inputs.append(_arg_signature((args, kwargs)))
                    member.launches.append([])
                    if self.backward and torch.is_grad_enabled():
                        member.grad_pattern.append((
                            requires_grad_pattern((args, kwargs)),
                            tuple(p.requires_grad for p in mod.parameters())))
                    self._open(name, "fwd")
                except Exception as err:  # noqa: BLE001 - never into the user's step
                    self.fail(err)

            def post(mod: Any, args: Any, kwargs: Any, out: Any, name: str = name) -> None:
                if self._quiet():
                    return
                try:
                    self._close(name, "fwd")
                    if self.backward and torch.is_grad_enabled():
                        self._watch_backward(name, out)
                except Exception as err:  # noqa: BLE001 - never into the user's step
                    self.fail(err)

            self.handles.append(module.register_forward_pre_hook(pre, with_kwargs=True))
            self.handles.append(module.register_forward_hook(post, with_kwargs=True,
                                                             always_call=True))

    def _watch_backward(self, name: str, out: Any) -> None:
        """Count the member's backward: a pre-hook on the autograd node of its first output
        that needs a gradient. (A module's full backward hooks would wrap its outputs in a
        view, which an in-place op after it, torchvision ResNet's ``relu(inplace=True)``
        after ``out += identity``, may not modify: the user's step would raise.)"""
        leaves, _ = torch.utils._pytree.tree_flatten(out)
        node = next((t.grad_fn for t in leaves if isinstance(t, torch.Tensor)
                     and t.grad_fn is not None), None)
        if node is None:
            return

        def counted(grad_outputs: Any) -> None:
            if not self._quiet():
                self.members[name].bwd_pre += 1

        self.handles.append(node.register_prehook(counted))

    def remove(self) -> None:
        for handle in self.handles:
            handle.remove()
        self.handles.clear()

    def record_op(self, func: Any, args: Any, kwargs: Any, result: Any) -> None:
        """Append a forward launch (a torch-level call that returned ``result``) to the
        current call of every member open on this thread. (Backward runs in autograd's C++
        engine, which a torch function mode does not see; the forward launches and the
        ``requires_grad`` pattern decide it.) Nothing is recorded while Dynamo traces or
        builds guards (it calls torch functions on fake, symbolic tensors), and an error
        stops recording instead of reaching the caller."""
        stack = getattr(self.local, "stack", None)
        if not stack or self._quiet() or _tracing():
            return
        try:
            name = function_name(func)
            if launches_nothing(name):
                return
            launch: Launch | None = None
            for member_name, direction, _ in stack:
                if direction != "fwd":
                    continue
                if launch is None:
                    launch = (name, _arg_signature((args, kwargs or {})),
                              _arg_signature(result))
                calls = self.members[member_name].launches
                if calls:
                    calls[-1].append(launch)
        except Exception as err:  # noqa: BLE001 - never into the user's step
            self.fail(err)

    def times_ms(self) -> dict[str, float]:
        out = {}
        for name, member in self.members.items():
            if self.cuda:
                out[name] = sum(s.elapsed_time(e) for s, e in member.events)
            else:
                out[name] = member.seconds * 1e3
        return out


def _tracing() -> bool:
    """Whether a compiler is at work on this thread (Dynamo's tracing context is set while
    it traces, builds guards and compiles), when Dynamo is loaded at all."""
    guards = sys.modules.get("torch._guards")
    context = getattr(guards, "TracingContext", None)
    try:
        return context is not None and context.try_get() is not None
    except Exception:  # noqa: BLE001 - a torch without it: not tracing
        return False


def _function_mode(recorder: _Recorder) -> Any:
    """A ``TorchFunctionMode`` feeding :meth:`_Recorder.record_op`. (Unlike a
    ``TorchDispatchMode``, entering it does not import ``torch._dynamo``.)"""
    from torch.overrides import TorchFunctionMode

    class _CallRecorder(TorchFunctionMode):
        def __torch_function__(self, func: Any, types: Any, args: Any = (),
                               kwargs: Any = None) -> Any:
            result = func(*args, **(kwargs or {}))
            recorder.record_op(func, args, kwargs, result)
            return result

    return _CallRecorder()


def _quiet_backward_hook_warning() -> Any:
    """Ignore PyTorch's warning that a full backward hook fires without inputs that require
    grad (the first block's): the hooks are the check's, not the user's. Returns the filter
    added, for :func:`_remove_filter` (which leaves every other filter as it is then)."""
    warnings.filterwarnings("ignore", message="Full backward hook is firing",
                            category=UserWarning)
    return warnings.filters[0]


def _remove_filter(entry: Any) -> None:
    if entry is None:
        return
    with contextlib.suppress(ValueError):
        cast("list[Any]", warnings.filters).remove(entry)
        mutated = getattr(warnings, "_filters_mutated", None)  # drop cached decisions
        if mutated is not None:
            mutated()


class SiblingCheck:
    """Watches one un-profiled iteration, then decides which identical siblings to replicate.

    ``with check: run_one_iteration()``, then :meth:`verdict`. Under ``torch-nsight
    profile``, :func:`torch_nsight.step` watches the step before the first chosen one.

    Args:
        model: the instrumented model.
        backward: also watch backward (adds backward hooks for the iteration).
        cuda: time with CUDA events (else wall-clock).
    """

    def __init__(self, model: nn.Module, *, backward: bool, cuda: bool) -> None:
        from torch_nsight.capture.compiled.inductor import runs_compiled

        self.cuda = cuda
        # A compiled model is not watched: hooks added now would be traced into its graphs
        # or make Dynamo compile them again, and its kernels are fused across modules.
        self.off = ("the model runs torch.compile graphs: every module is profiled"
                    if runs_compiled(model) else None)
        self.candidates = [] if self.off else candidate_groups(model)
        self.recorder = _Recorder(model, [n for g in self.candidates for n in g],
                                  backward=backward, cuda=cuda)
        self._mode: Any = None
        self._quiet: Any = None
        self._times: dict[str, float] | None = None

    def __enter__(self) -> SiblingCheck:
        if self.candidates:
            self._quiet = _quiet_backward_hook_warning()
            try:
                self.recorder.install()
                self._mode = _function_mode(self.recorder)
                self._mode.__enter__()
            except Exception as err:  # noqa: BLE001 - the step runs unwatched instead
                self._mode = None
                self.recorder.remove()
                _remove_filter(self._quiet)
                self.recorder.fail(err)
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self._mode is None:
            return
        try:
            self._mode.__exit__(*exc_info)
            if self.cuda:
                torch.cuda.synchronize()
            self._times = self.recorder.times_ms()
        except Exception as err:  # noqa: BLE001 - never into the user's step
            self.recorder.fail(err)
        finally:
            self._mode = None
            self.recorder.remove()
            _remove_filter(self._quiet)
            self._quiet = None

    def verdict(self) -> dict[str, Any]:
        """What the iteration showed (JSON-ready): ``status`` (``replicated``, ``mismatch``
        when candidates differ when run, ``none`` without candidates), ``groups``
        (representative, replicas, ops per member, time_ms per member), ``mismatches`` (one
        line each)."""
        if self.off is not None:
            return {"status": "none", "groups": [], "mismatches": [self.off]}
        if self.recorder.failed is not None:
            return {"status": "error", "groups": [], "mismatches": [],
                    "error": self.recorder.failed}
        if not self.candidates or self._times is None:
            return {"status": "none", "groups": [], "mismatches": []}
        recorder, times = self.recorder, self._times
        verified: list[list[str]] = []
        mismatches: list[tuple[list[str], str]] = []
        for names in self.candidates:
            by_signature: dict[tuple[Any, ...], list[str]] = {}
            for name in names:
                member = recorder.members[name]
                if member.calls and member.op_count():
                    by_signature.setdefault(member.signature(), []).append(name)
            parts = sorted(by_signature.values(), key=lambda p: names.index(p[0]))
            verified.extend(p for p in parts if len(p) > 1)
            if len(parts) > 1:
                mismatches.append((names, describe_mismatch(
                    parts, [recorder.members[p[0]] for p in parts])))
        groups: list[dict[str, Any]] = []
        replicas: list[str] = []
        for part in sorted(verified, key=lambda p: p[0].count(".")):
            if any(is_inside(part[0], r) for r in replicas):
                continue  # inside a replica: its representative's subtree covers it
            replicas.extend(part[1:])
            groups.append({"representative": part[0], "replicas": part[1:],
                           "ops": recorder.members[part[0]].op_count(),
                           "time_ms": {n: round(times[n], 4) for n in part}})
        # twins inside a replica are covered by its representative: no word about them
        lines = [line for names, line in mismatches
                 if not all(any(is_inside(n, r) for r in replicas) for n in names)]
        status = "replicated" if groups else ("mismatch" if lines else "none")
        return {"status": status, "groups": groups, "mismatches": lines}


def check_siblings(model: nn.Module, run_once: Callable[[], None], *, backward: bool,
                   cuda: bool) -> dict[str, Any]:
    """Run ``run_once`` once (un-profiled) and decide which identical siblings to replicate.

    Args:
        model: the instrumented model.
        run_once: one iteration (forward, and backward if ``backward``).
        backward: whether ``run_once`` runs backward (adds backward hooks).
        cuda: time with CUDA events (else wall-clock).

    Returns:
        :meth:`SiblingCheck.verdict`.
    """
    check = SiblingCheck(model, backward=backward, cuda=cuda)
    if check.candidates:
        with check:
            run_once()
    return check.verdict()
