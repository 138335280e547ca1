"""A ``Linear`` whose output features are computed padded to a multiple (the fix of
``gemm_misaligned``: cuBLAS picks an aligned tensor-core kernel), the output sliced back.

The module keeps its class's behaviour, its parameters (the optimizer holding them still
updates them), its ``state_dict`` keys and its ``out_features``: only its class changes, to
a subclass whose ``forward`` zero-pads the weight (and bias) rows, runs the wider GEMM and
returns the first ``out_features`` columns. The padding rows are zeros made each forward, so
gradients reach the original weight unchanged. The cost: one copy of the weight per forward.
"""

from __future__ import annotations

import torch.nn.functional as F  # noqa: N812 - PyTorch's own spelling
from torch import Tensor, nn

__all__ = ["PaddedLinear", "pad_linear", "unpad_linear"]


class PaddedLinear(nn.Linear):
    """What :func:`pad_linear` turns a ``Linear`` into (a subclass of its own class)."""

    padded_features: int
    unpadded_class: type[nn.Linear]

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002 - nn.Linear's own name
        """The wider GEMM on zero-padded weight rows, sliced to ``out_features``."""
        extra = self.padded_features - self.out_features
        weight = F.pad(self.weight, (0, 0, 0, extra))
        bias = None if self.bias is None else F.pad(self.bias, (0, extra))
        return F.linear(input, weight, bias)[..., :self.out_features]

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


def pad_linear(module: nn.Linear, multiple: int) -> None:
    """Compute ``module``'s output features padded up to ``multiple``, in place.

    Raises:
        TypeError: ``module`` is not an ``nn.Linear``, or is padded already.
    """
    if not isinstance(module, nn.Linear) or isinstance(module, PaddedLinear):
        raise TypeError(f"expected an nn.Linear not padded yet, got {type(module).__name__}")
    cls = type(module)
    module.__class__ = _padded_class(cls)
    padded: PaddedLinear = module  # type: ignore[assignment]
    padded.padded_features = -(-module.out_features // multiple) * multiple
    padded.unpadded_class = cls


def unpad_linear(module: nn.Linear) -> None:
    """Undo :func:`pad_linear` (nothing for a module that is not padded)."""
    if isinstance(module, PaddedLinear):
        module.__class__ = module.unpadded_class  # type: ignore[assignment]
        del module.padded_features, module.unpadded_class
