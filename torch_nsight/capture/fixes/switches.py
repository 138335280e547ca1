"""Fixes switched on in the user's script, asked for by the command that runs it
(:attr:`~torch_nsight.environment.ScriptEnv.fixes`, ``torch-nsight profile --verify``), applied by
:func:`torch_nsight.instrument` to the model it is given, before it instruments anything.

One small function per fix kind (the registry :data:`SWITCHES`); each checks everything
first, then changes the model, and gives back a :class:`Toggle` that switches the fix off
and on again, cheaply enough to do between two steps (nothing is compiled, checked or padded
again): ``profile --verify`` alternates the fix with the model as it was, step by step
(:mod:`torch_nsight.capture.script.step_timer`). A fix that fails is undone and reported (logged,
and written with the step times), never left half-way.

* ``compile``: ``module.compile(**options)`` (in place: names, parameters and the optimizer
  holding them stay), of each target or the whole model; off and on set the module's
  compiled callable aside and back (the same one: no new wrapper, no recompilation);
* ``channels_last``: the target's 4-D parameters and buffers channels-last (5-D ones
  ``channels_last_3d``), and its 4-D (5-D) tensor inputs through a forward pre-hook; off
  converts them back and removes the hook;
* ``tf32``: ``torch.backends.cuda.matmul.allow_tf32`` and ``torch.backends.cudnn.allow_tf32``;
  off restores what they were;
* ``pad_linear``: a ``Linear``'s output features padded once, in place, to a multiple,
  its output sliced back (:mod:`torch_nsight.capture.fixes.padded`); it stays padded, and off runs
  ``F.linear`` on the parameters' first ``out_features`` rows (:func:`_unpadded_forward`);
* ``sdpa_backend``: ``torch.nn.attention.sdpa_kernel(backend)`` around the target's forward
  (hooks, removed when off);
* ``gelu_tanh``: an activation module that computes the tanh GELU by its formula (checked on
  a probe first) computes it with ``F.gelu(x, approximate="tanh")``, one kernel; off gives
  it its own forward back;
* ``cudnn_benchmark``: ``torch.backends.cudnn.benchmark``; off restores what it was;
* ``cast``: inside the target's forward, the grouped GEMMs autocast leaves in float32
  (``torch._grouped_mm``, ``F.grouped_mm``) take their float inputs cast to 16-bit (the
  option ``dtype``, else autocast's own dtype where it is on, else bfloat16) and give their
  result back in float32: above autograd, so their backward runs 16-bit too; off removes
  the hooks;
* ``fused_optimizer``: the optimizers of the model's parameters step with their fused
  implementation (:class:`~torch_nsight.capture.fixes.toggle.FusedFlag`); off restores their flags.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MethodType
from typing import Any

import torch
import torch.nn.functional as F  # noqa: N812 - PyTorch's own spelling
from torch import Tensor, nn
from torch.overrides import TorchFunctionMode

from torch_nsight.capture.fixes.padded import PaddedLinear, check_paddable, pad_linear, unpad_linear
from torch_nsight.capture.fixes.toggle import (
    CHANNELS_LAST,
    FusedFlag,
    OptimizerState,
    Toggle,
    built_in,
    compile_forward,
    forward_swap,
    together,
)
from torch_nsight.capture.script.step_timer import alternate, timer_for
from torch_nsight.environment import APPLY_ENV, ScriptEnv
from torch_nsight.status import current_rank
from torch_nsight.verify_exchange import FixSpec, format_fixes, target_matches

logger = logging.getLogger(__name__)

__all__ = ["FixOutcome", "SWITCHES", "Toggle", "apply_fixes", "apply_requested_fixes",
           "find_targets"]

Targets = list[tuple[str, nn.Module]]


Switch = Callable[[nn.Module, Targets, Mapping[str, Any]], Toggle]
#: The function that applies each fix kind; it raises before changing anything it cannot.
SWITCHES: dict[str, Switch] = {}
#: Fix kinds that act on the whole process, not on a module.
GLOBAL_KINDS = frozenset({"tf32", "cudnn_benchmark", "fused_optimizer"})


@dataclass(frozen=True)
class FixOutcome:
    """What became of one fix: ``applied`` (to ``modules``) or ``failed`` (``error``)."""

    spec: FixSpec
    status: str
    error: str | None = None
    modules: tuple[str, ...] = ()
    toggle: Toggle | None = field(default=None, compare=False, repr=False)

    def to_json(self) -> dict[str, Any]:
        """The outcome as written with the step times."""
        return {"fix": self.spec.fix, "target": self.spec.target,
                "options": dict(self.spec.options), "status": self.status,
                "error": self.error, "modules": list(self.modules)}


def switch(kind: str) -> Callable[[Switch], Switch]:
    """Register the function that applies fix ``kind``."""
    def register(function: Switch) -> Switch:
        SWITCHES[kind] = function
        return function
    return register


def _each(targets: Targets, do: Callable[[nn.Module], Toggle]) -> Toggle:
    """``do`` on every target, one toggle for all; if one raises, the ones done are undone
    first."""
    toggles: list[Toggle] = []
    try:
        for _, module in targets:
            toggles.append(do(module))
    except BaseException:
        for toggle in reversed(toggles):
            toggle.undo()
        raise
    return together(toggles)


@switch("compile")
def _compile(model: nn.Module, targets: Targets, options: Mapping[str, Any]) -> Toggle:
    compiled = [name or type(m).__name__ for name, m in targets
                if getattr(m, "_compiled_call_impl", None) is not None]
    if compiled:
        raise ValueError(f"already compiled: {', '.join(compiled)}")

    own = [name or type(m).__name__ for name, m in targets if "forward" in vars(m)]
    if own:
        raise ValueError(f"{', '.join(own)} has a forward set on the instance (another fix?): "
                         "not compiled")

    def do(module: nn.Module) -> Toggle:
        if built_in(module):
            return compile_forward(module, options)
        module.compile(**dict(options))
        kept = module._compiled_call_impl  # compiled on its first call, kept when off
        return Toggle(lambda: setattr(module, "_compiled_call_impl", kept),
                      lambda: setattr(module, "_compiled_call_impl", None))
    return _each(targets, do)


def _to_channels_last(value: Any) -> Any:
    if isinstance(value, torch.Tensor) and value.dim() in CHANNELS_LAST:
        return value.contiguous(memory_format=CHANNELS_LAST[value.dim()])
    if isinstance(value, (list, tuple)):
        return type(value)(_to_channels_last(v) for v in value)
    return value


def _laid_out(module: nn.Module, channels_last: bool) -> None:
    """The module's 4-D and 5-D parameters and buffers channels-last (``channels_last``,
    ``channels_last_3d``: ``module.to(memory_format=...)`` takes one format for both and
    refuses a tensor of the other rank), or back to contiguous; in place, as ``.to`` does."""
    def convert(tensor: torch.Tensor) -> torch.Tensor:
        if tensor.dim() not in CHANNELS_LAST:
            return tensor
        return tensor.contiguous(memory_format=CHANNELS_LAST[tensor.dim()] if channels_last
                                 else torch.contiguous_format)
    module._apply(convert)


@switch("channels_last")
def _channels_last(model: nn.Module, targets: Targets, options: Mapping[str, Any]) -> Toggle:
    def inputs(module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]
               ) -> tuple[tuple[Any, ...], dict[str, Any]]:
        return _to_channels_last(args), {k: _to_channels_last(v) for k, v in kwargs.items()}

    def do(module: nn.Module) -> Toggle:
        hooks: list[Any] = []
        state = OptimizerState(module)

        def on() -> None:  # the parameters converted in place (the same Parameter objects)
            _laid_out(module, channels_last=True)
            state.convert(channels_last=True)
            hooks.append(module.register_forward_pre_hook(inputs, with_kwargs=True))

        def off() -> None:
            hooks.pop().remove()
            _laid_out(module, channels_last=False)
            state.convert(channels_last=False)
        on()
        return Toggle(on, off)
    return _each(targets, do)


@switch("tf32")
def _tf32(model: nn.Module, targets: Targets, options: Mapping[str, Any]) -> Toggle:
    saved = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)

    def on() -> None:
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True

    def off() -> None:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved
    on()
    return Toggle(on, off)


@switch("cudnn_benchmark")
def _cudnn_benchmark(model: nn.Module, targets: Targets, options: Mapping[str, Any]) -> Toggle:
    saved = torch.backends.cudnn.benchmark

    def on() -> None:
        torch.backends.cudnn.benchmark = True

    def off() -> None:
        torch.backends.cudnn.benchmark = saved
    on()
    return Toggle(on, off)


@switch("fused_optimizer")
def _fused_optimizer(model: nn.Module, targets: Targets, options: Mapping[str, Any]) -> Toggle:
    flag = FusedFlag(model)
    return Toggle(lambda: flag.set(True), lambda: flag.set(False), flag.remove)


def _unpadded_forward(self: PaddedLinear, input: Tensor) -> Tensor:  # noqa: A002
    """A padded Linear switched off: ``F.linear`` on its parameters' first ``out_features``
    rows (views: no copy), the GEMM the Linear ran before it was padded, with the same
    outputs. Its backward writes the gradient of those rows into the padded parameter's
    (zeros in the padded rows: a small extra copy the unpadded Linear does not make), so
    the optimizer goes on updating the same parameters and the padded rows stay zero."""
    rows = self.out_features
    return F.linear(input, self.weight[:rows], None if self.bias is None else self.bias[:rows])


@switch("pad_linear")
def _pad_linear(model: nn.Module, targets: Targets, options: Mapping[str, Any]) -> Toggle:
    multiple = int(options.get("multiple", 64))
    check_paddable(model, targets, multiple)

    def do(module: nn.Module) -> Toggle:
        pad_linear(module, multiple)  # type: ignore[arg-type]
        # it stays padded (padding again would refuse a stepped optimizer): off is the
        # unpadded GEMM set on the instance, on the padded class's forward again
        unpadded = forward_swap(module, MethodType(_unpadded_forward, module))
        unpadded.off()

        def undo() -> None:
            unpadded.off()
            unpad_linear(module)  # type: ignore[arg-type]
        return Toggle(unpadded.off, unpadded.on, undo)
    return _each(targets, do)


#: Where the tanh GELU formula and the fused op must agree for ``gelu_tanh`` to apply.
_GELU_PROBE = (-6.0, 6.0, 97)


def _tanh_gelu(x: torch.Tensor) -> torch.Tensor:
    return nn.functional.gelu(x, approximate="tanh")


@switch("gelu_tanh")
def _gelu_tanh(model: nn.Module, targets: Targets, options: Mapping[str, Any]) -> Toggle:
    probe = torch.linspace(*_GELU_PROBE)
    for name, module in targets:
        label = name or type(module).__name__
        if any(True for _ in module.parameters()) or any(True for _ in module.children()):
            raise ValueError(f"{label} ({type(module).__name__}) has parameters or "
                             "submodules: not an activation to replace")
        with torch.no_grad():
            out = module(probe)
        if not (isinstance(out, torch.Tensor) and out.shape == probe.shape and torch.allclose(
                out.float(), _tanh_gelu(probe), rtol=1e-4, atol=1e-5)):
            raise ValueError(f"{label} ({type(module).__name__}) does not compute the tanh "
                             "GELU: F.gelu(x, approximate='tanh') would change the model")

    return _each(targets, lambda module: forward_swap(module, _tanh_gelu))


@switch("sdpa_backend")
def _sdpa_backend(model: nn.Module, targets: Targets, options: Mapping[str, Any]) -> Toggle:
    from torch.nn.attention import SDPBackend, sdpa_kernel

    backend = {"flash": SDPBackend.FLASH_ATTENTION, "math": SDPBackend.MATH,
               "efficient": SDPBackend.EFFICIENT_ATTENTION,
               "cudnn": SDPBackend.CUDNN_ATTENTION}[str(options["backend"])]
    return _around_forward(targets, lambda: sdpa_kernel(backend))


#: The ops ``cast`` casts: GEMMs ``torch.autocast`` does not cast (by function name).
_UNCAST = frozenset({"_grouped_mm", "grouped_mm"})
_HALF = {"bfloat16": torch.bfloat16, "float16": torch.float16}


class _CastUncast(TorchFunctionMode):
    """Casts the float32 inputs of :data:`_UNCAST` calls to ``dtype``, their result back."""

    def __init__(self, dtype: torch.dtype | None) -> None:
        super().__init__()
        self.dtype = dtype

    def __torch_function__(self, func: Any, types: Any, args: Any = (),
                           kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        if getattr(func, "__name__", "") not in _UNCAST:
            return func(*args, **kwargs)
        dtype = self.dtype or (torch.get_autocast_dtype("cuda")
                               if torch.is_autocast_enabled("cuda") else torch.bfloat16)

        def cast(value: Any) -> Any:
            return (value.to(dtype) if isinstance(value, Tensor)
                    and value.dtype == torch.float32 else value)
        given = [a for a in (*args, *kwargs.values())
                 if isinstance(a, Tensor) and a.is_floating_point()]
        out = func(*[cast(a) for a in args], **{k: cast(v) for k, v in kwargs.items()})
        return out.to(torch.float32) if given and given[0].dtype == torch.float32 else out


@switch("cast")
def _cast(model: nn.Module, targets: Targets, options: Mapping[str, Any]) -> Toggle:
    name = options.get("dtype")
    if name is not None and (not isinstance(name, str) or name not in _HALF):
        raise ValueError(f"cast to {name!r}: one of {', '.join(_HALF)}")
    return _around_forward(targets, lambda: _CastUncast(None if name is None else _HALF[name]))


def _around_forward(targets: Targets, make: Callable[[], Any]) -> Toggle:
    """A context made by ``make`` entered before and left after (always) each forward of
    every target, while on; off removes the hooks."""
    entered = threading.local()  # the contexts open on this thread (nested calls)

    def enter(module: nn.Module, args: Any) -> None:
        context = make()
        context.__enter__()
        entered.__dict__.setdefault("stack", []).append(context)

    def leave(module: nn.Module, args: Any, output: Any) -> None:
        stack = entered.__dict__.get("stack")
        if stack:
            stack.pop().__exit__(None, None, None)

    def do(module: nn.Module) -> Toggle:
        hooks: list[Any] = []

        def on() -> None:
            hooks.extend([module.register_forward_pre_hook(enter),
                          module.register_forward_hook(leave, always_call=True)])

        def off() -> None:
            while hooks:
                hooks.pop().remove()
        on()
        return Toggle(on, off)
    return _each(targets, do)


def find_targets(model: nn.Module, target: str) -> Targets:
    """The modules ``target`` names (``""``: the model itself), in ``named_modules()`` order.

    Raises:
        ValueError: no module of the model has that name.
    """
    if not target:
        return [("", model)]
    found = [(n, m) for n, m in model.named_modules() if n and target_matches(target, n)]
    if not found:
        names = [n for n, _ in model.named_modules() if n]
        wrapper = next((p for p in ("module.", "_orig_mod.") if names
                        and all(n.startswith(p) or n == p[:-1] for n in names)), None)
        hint = (f": its modules are named {wrapper}<name>, so it wraps the model: pass "
                "instrument() the model inside (e.g. ddp.module)" if wrapper else "")
        raise ValueError(f"{type(model).__name__} has no module named {target!r}{hint}")
    return found


def apply_fixes(model: nn.Module, specs: list[FixSpec]) -> list[FixOutcome]:
    """Apply each fix to ``model``; one that fails is undone and reported, the others kept.

    Args:
        model: the model (its modules are found by their names in ``named_modules()``).
        specs: the fixes, checked (:func:`~torch_nsight.verify_exchange.parse_fixes`).

    Returns:
        One outcome per fix, in order; an applied one holds its :class:`Toggle`.
    """
    outcomes = []
    for spec in specs:
        try:
            targets = ([("", model)] if spec.fix in GLOBAL_KINDS
                       else find_targets(model, spec.target))
            toggle = SWITCHES[spec.fix](model, targets, spec.options)
        except Exception as err:  # noqa: BLE001 - reported, the script goes on without it
            outcomes.append(FixOutcome(spec, "failed", f"{type(err).__name__}: {err}"))
            logger.warning("torch_nsight: fix %s NOT applied: %s", spec.describe(), err)
            continue
        names = tuple(n for n, _ in targets) if spec.fix not in GLOBAL_KINDS else ()
        outcomes.append(FixOutcome(spec, "applied", modules=names, toggle=toggle))
        logger.info("torch_nsight: applied fix %s%s", spec.describe(),
                    f" to {len(names)} module(s)" if names and names != ("",) else "")
    return outcomes


_DONE: set[str] = set()


def apply_requested_fixes(model: nn.Module,
                          environ: Mapping[str, str] | None = None) -> list[FixOutcome]:
    """Apply the fixes the command asks for (:attr:`~torch_nsight.environment.ScriptEnv.fixes`),
    once per process (to the first model instrumented), and note the outcomes with the step
    times; under :attr:`~torch_nsight.environment.ScriptEnv.alternate` the fixes applied are
    then switched off and on step by step (:func:`~torch_nsight.capture.script.step_timer.alternate`).

    Args:
        model: the model :func:`torch_nsight.instrument` was given.
        environ: where to read the request (default ``os.environ``).

    Returns:
        The outcomes (empty when nothing is asked for, or already applied).
    """
    env = os.environ if environ is None else environ
    script = ScriptEnv.from_env(env)
    unread = script.refusal(APPLY_ENV)  # malformed: logged by from_env, no fix applied
    if not script.fixes and unread is None:
        return []
    asked = format_fixes(script.fixes) if unread is None else unread
    if asked in _DONE:
        logger.info("torch_nsight: the fixes asked for were applied to the first model "
                    "instrumented; not to %s", type(model).__name__)
        return []
    _DONE.add(asked)
    if unread is None:
        outcomes = apply_fixes(model, list(script.fixes))
        written = [o.to_json() for o in outcomes]
    else:
        outcomes = []
        written = [{"fix": None, "target": None, "options": {}, "status": "failed",
                    "error": unread, "modules": []}]
    timer = timer_for(script, current_rank(env))
    if timer is not None:
        timer.note_fixes(written)
    toggles = [o.toggle for o in outcomes if o.toggle is not None]
    if toggles:
        alternate(together(toggles), script)
    return outcomes
