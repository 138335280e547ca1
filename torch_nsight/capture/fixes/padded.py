"""A ``Linear`` padded once, in place, to output features a multiple of some number (the fix
of ``gemm_misaligned``: cuBLAS picks an aligned tensor-core kernel), its output sliced back:
what a user does by hand with ``nn.Linear(768, 50304)`` and ``logits[..., :50257]``.

The module keeps its parameters (the same ``Parameter`` objects: an optimizer made before
or after still updates them, and a weight tied to an ``nn.Embedding`` stays tied), its
``state_dict`` keys and its ``out_features``. Their ``.data`` becomes a zero-padded copy
(weight rows, bias entries; dtype, device and ``requires_grad`` kept), made once; the class
becomes a subclass whose ``forward`` is ``F.linear`` on the padded parameters, sliced to
``out_features``. No copy per forward: the padded rows' outputs are sliced away, so their
gradients are zero and they stay zero under SGD, Adam and AdamW's weight decay (zero times a
factor); an embedding tied to the weight looks up ids below ``out_features`` only.

What changes: ``state_dict`` holds the padded shapes (a checkpoint written while padded has
them, and one loaded afterwards with the old shapes does not fit). Refused, the module left
as it was (:func:`check_paddable`): optimizer state already shaped like a parameter (an
optimizer that has stepped: pad before the first step), a parameter that is not a plain
``Parameter`` (a parametrization, a DTensor, a sparse or quantized tensor), one also held by
a module other than an ``nn.Embedding``, a module inside a ``DistributedDataParallel``
(its gradient buckets are laid out for the old shapes).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F  # noqa: N812 - PyTorch's own spelling
from torch import Tensor, nn

from torch_nsight.capture.fixes.toggle import live_instances

__all__ = ["PaddedLinear", "check_paddable", "pad_linear", "padded_size", "unpad_linear"]


class PaddedLinear(nn.Linear):
    """What :func:`pad_linear` turns a ``Linear`` into (a subclass of its own class)."""

    padded_features: int
    unpadded_class: type[nn.Linear]

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002 - nn.Linear's own name
        """The GEMM on the padded parameters, sliced to ``out_features``."""
        return F.linear(input, self.weight, self.bias)[..., :self.out_features]

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, padded_features={self.padded_features}"


_CLASSES: dict[type[nn.Linear], type[PaddedLinear]] = {}


def _padded_class(cls: type[nn.Linear]) -> type[PaddedLinear]:
    """``PaddedLinear`` for ``nn.Linear``; for a subclass, one that derives from both."""
    if cls is nn.Linear:
        return PaddedLinear
    if cls not in _CLASSES:
        _CLASSES[cls] = type(f"Padded{cls.__name__}", (PaddedLinear, cls), {})
    return _CLASSES[cls]


def padded_size(size: int, multiple: int) -> int:
    """``size`` rounded up to a multiple of ``multiple``."""
    return -(-size // multiple) * multiple


def _parameters(module: nn.Linear) -> list[tuple[str, nn.Parameter]]:
    """The module's own weight and bias (``bias=False``: the weight alone)."""
    names = ("weight", "bias") if module.bias is not None else ("weight",)
    return [(name, module._parameters[name]) for name in names  # type: ignore[misc]
            if name in module._parameters]


def _check_parameters(module: nn.Linear, label: str) -> list[nn.Parameter]:
    """The weight and bias, if each is a plain ``Parameter`` of the module's own shape."""
    shapes = {"weight": (module.out_features, module.in_features),
              "bias": (module.out_features,)}
    found = dict(_parameters(module))
    for name in shapes if module.bias is not None else ("weight",):
        param = found.get(name)
        if not isinstance(param, nn.Parameter):
            raise ValueError(f"{label}.{name} is not a registered nn.Parameter (a "
                             "parametrization or weight norm?): it cannot be padded in place")
        if type(param.data) is not Tensor or param.layout is not torch.strided:
            raise ValueError(f"{label}.{name} is a {type(param.data).__name__} "
                             f"({param.layout}), not a plain dense tensor")
        if tuple(param.shape) != shapes[name]:
            raise ValueError(f"{label}.{name} has shape {tuple(param.shape)}, not "
                             f"{shapes[name]}")
    return list(found.values())


def _check_holders(model: nn.Module, module: nn.Linear, label: str,
                   params: list[nn.Parameter]) -> None:
    """Refuse a parameter that another module uses, unless that module is an embedding."""
    ids = {id(p) for p in params}
    for name, other in model.named_modules():
        shared = [n for n, p in other._parameters.items() if p is not None and id(p) in ids]
        if other is not module and shared and not isinstance(other, nn.Embedding):
            raise ValueError(f"{label}'s parameter is also {name}.{shared[0]} of a "
                             f"{type(other).__name__}, which would see the padded shape")


def _check_elsewhere(labelled: list[tuple[str, nn.Linear, list[nn.Parameter]]]) -> None:
    """Refuse parameters an optimizer holds state of their shape for (it has stepped), or
    modules a ``DistributedDataParallel`` wraps (found among the live objects, once)."""
    modules = {id(module): label for label, module, _ in labelled}
    owners = {id(p): (label, p) for label, _, params in labelled for p in params}
    for found in live_instances(nn.parallel.DistributedDataParallel, torch.optim.Optimizer):
        if isinstance(found, nn.parallel.DistributedDataParallel):
            wrapped = [modules[id(m)] for m in found.modules() if id(m) in modules]
            if wrapped:
                raise ValueError(f"{wrapped[0]} is inside a DistributedDataParallel, whose "
                                 "gradient buckets hold the unpadded shapes: call "
                                 "instrument() before wrapping the model")
            continue
        for param, state in list(found.state.items()):
            if id(param) not in owners or not isinstance(state, dict):
                continue
            label, held = owners[id(param)]
            if any(isinstance(v, Tensor) and v.shape == held.shape for v in state.values()):
                raise ValueError(f"{type(found).__name__} already holds state shaped like "
                                 f"{label}'s parameter {tuple(held.shape)}: the fix must be "
                                 "applied before the first optimizer step (call "
                                 "instrument() before training)")


def check_paddable(model: nn.Module, targets: list[tuple[str, nn.Module]],
                   multiple: int) -> None:
    """Check that :func:`pad_linear` can pad each target of ``model``, changing nothing.

    Raises:
        ValueError: a target is not an ``nn.Linear``, is padded already or aligned already,
            or one of the refusals of the module docstring.
    """
    labelled: list[tuple[str, nn.Linear, list[nn.Parameter]]] = []
    for name, module in targets:
        label = name or "the model"
        if not isinstance(module, nn.Linear) or isinstance(module, PaddedLinear):
            raise ValueError(f"{label} is a {type(module).__name__}, not an nn.Linear "
                             "(or one padded already)")
        if "forward" in vars(module):
            raise ValueError(f"{label} has a forward set on the instance (another fix?): "
                             "not padded")
        if type(module).forward is not nn.Linear.forward:  # its own forward would be lost
            raise ValueError(f"{label} is a {type(module).__name__} with a forward of its own "
                             "(not nn.Linear's): padding it would change what it computes")
        if module.out_features % multiple == 0:
            raise ValueError(f"{label} has {module.out_features} output features, already "
                             f"a multiple of {multiple}: the misaligned dimension is another "
                             "one")
        params = _check_parameters(module, label)
        _check_holders(model, module, label, params)
        labelled.append((label, module, params))
    _check_elsewhere(labelled)


@torch.no_grad()
def _resize_rows(tensor: Tensor, rows: int) -> Tensor:
    """``tensor`` with its first dimension cut or zero-padded to ``rows`` (a new tensor)."""
    if rows <= tensor.shape[0]:
        return tensor[:rows].clone()
    resized = tensor.new_zeros((rows, *tensor.shape[1:]))
    resized[:tensor.shape[0]].copy_(tensor)
    return resized


def _resize_parameters(module: nn.Linear, rows: int) -> None:
    """Each parameter's ``.data`` (and gradient, if any) resized to ``rows`` in place: all
    copies made first, so that one that fails (out of memory) leaves the module as it was."""
    resized = [(param, _resize_rows(param.data, rows),
                None if param.grad is None else _resize_rows(param.grad, rows))
               for _, param in _parameters(module)]
    for param, data, grad in resized:
        param.grad = None
        param.data = data
        param.grad = grad


def pad_linear(module: nn.Linear, multiple: int) -> None:
    """Pad ``module``'s output features up to ``multiple``, once, in place.

    Call :func:`check_paddable` first: this checks only the module's own type.

    Raises:
        TypeError: ``module`` is not an ``nn.Linear``, or is padded already.
    """
    if not isinstance(module, nn.Linear) or isinstance(module, PaddedLinear):
        raise TypeError(f"expected an nn.Linear not padded yet, got {type(module).__name__}")
    cls = type(module)
    padded_features = padded_size(module.out_features, multiple)
    _resize_parameters(module, padded_features)
    module.__class__ = _padded_class(cls)
    padded: PaddedLinear = module  # type: ignore[assignment]
    padded.padded_features = padded_features
    padded.unpadded_class = cls


def unpad_linear(module: nn.Linear) -> None:
    """Undo :func:`pad_linear`, keeping the values of the first ``out_features`` rows
    (nothing for a module that is not padded)."""
    if isinstance(module, PaddedLinear):
        _resize_parameters(module, module.out_features)
        module.__class__ = module.unpadded_class  # type: ignore[assignment]
        del module.padded_features, module.unpadded_class
