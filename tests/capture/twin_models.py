"""Blocks as torchvision and timm write them, for the sibling check's tests on the CPU.

Neither library is importable on the CPU machine, so their blocks are copied here as they
are written upstream (torchvision 0.28 ``models/convnext.py`` and ``ops/stochastic_depth.py``;
timm 1.0 ``layers/drop.py`` and the ViT ``Block``'s residual branch): what matters to the check
is the Python that decides which torch calls run, and that is kept line for line.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F  # noqa: N812 - as torchvision writes it
from torch import nn


# torchvision.ops.stochastic_depth
def stochastic_depth(input: torch.Tensor, p: float, mode: str,
                     training: bool = True) -> torch.Tensor:
    if p < 0.0 or p > 1.0:
        raise ValueError(f"drop probability has to be between 0 and 1, but got {p}")
    if mode not in ["batch", "row"]:
        raise ValueError(f"mode has to be either 'batch' or 'row', but got {mode}")
    if not training or p == 0.0:
        return input
    survival_rate = 1.0 - p
    if mode == "row":  # noqa: SIM108 - as upstream writes it
        size = [input.shape[0]] + [1] * (input.ndim - 1)
    else:
        size = [1] * input.ndim
    noise = torch.empty(size, dtype=input.dtype, device=input.device)
    noise = noise.bernoulli_(survival_rate)
    if survival_rate > 0.0:
        noise.div_(survival_rate)
    return input * noise


class StochasticDepth(nn.Module):
    def __init__(self, p: float, mode: str) -> None:
        super().__init__()
        self.p = p
        self.mode = mode

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return stochastic_depth(input, self.p, self.mode, self.training)


# torchvision.models.convnext
class Permute(nn.Module):
    def __init__(self, dims: list[int]) -> None:
        super().__init__()
        self.dims = dims

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.permute(x, self.dims)


class LayerNorm2d(nn.LayerNorm):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.permute(0, 2, 3, 1)
        x = F.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)
        x = x.permute(0, 3, 1, 2)
        return x


class CNBlock(nn.Module):
    def __init__(self, dim: int, layer_scale: float, stochastic_depth_prob: float) -> None:
        super().__init__()
        self.block = nn.Sequential(
            nn.Conv2d(dim, dim, kernel_size=7, padding=3, groups=dim, bias=True),
            Permute([0, 2, 3, 1]),
            nn.LayerNorm(dim, eps=1e-6),
            nn.Linear(in_features=dim, out_features=4 * dim, bias=True),
            nn.GELU(),
            nn.Linear(in_features=4 * dim, out_features=dim, bias=True),
            Permute([0, 3, 1, 2]),
        )
        self.layer_scale = nn.Parameter(torch.ones(dim, 1, 1) * layer_scale)
        self.stochastic_depth = StochasticDepth(stochastic_depth_prob, "row")

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        result = self.layer_scale * self.block(input)
        result = self.stochastic_depth(result)
        result += input
        return result


class ConvNeXtStage(nn.Module):
    """A stem (its norm leaves channels-last strides) and one stage of ConvNeXt blocks whose stochastic-depth rate grows with the
    block's index in the whole model, from ``first_block`` on, as
    ``torchvision.models.ConvNeXt`` sets it (0.1 over 18 blocks for ConvNeXt-T)."""

    def __init__(self, blocks: int = 4, dim: int = 8, first_block: int = 0,
                 total_blocks: int = 18) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, dim, kernel_size=4, stride=4),
                                  LayerNorm2d(dim, eps=1e-6))
        self.stage = nn.Sequential(*[
            CNBlock(dim, 1e-6, 0.1 * (first_block + i) / (total_blocks - 1.0))
            for i in range(blocks)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.stage(self.stem(x))


# timm.layers.drop
def drop_path(x: torch.Tensor, drop_prob: float = 0.0, training: bool = False,
              scale_by_keep: bool = True) -> torch.Tensor:
    if drop_prob == 0.0 or not training:
        return x
    keep_prob = 1 - drop_prob
    shape = (x.shape[0],) + (1,) * (x.ndim - 1)
    random_tensor = x.new_empty(shape).bernoulli_(keep_prob)
    if keep_prob > 0.0 and scale_by_keep:
        random_tensor.div_(keep_prob)
    return x * random_tensor


class DropPath(nn.Module):
    def __init__(self, drop_prob: float = 0.0, scale_by_keep: bool = True) -> None:
        super().__init__()
        self.drop_prob = drop_prob
        self.scale_by_keep = scale_by_keep

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return drop_path(x, self.drop_prob, self.training, self.scale_by_keep)


class MlpBlock(nn.Module):
    """The MLP half of timm's ViT ``Block``: ``x + drop_path(ls(mlp(norm(x))))``, with a
    DropPath only where the rate is above 0 (``nn.Identity`` else), as timm builds it."""

    def __init__(self, dim: int, drop_path_rate: float) -> None:
        super().__init__()
        self.norm2 = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, 4 * dim)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(4 * dim, dim)
        self.drop_path2 = DropPath(drop_path_rate) if drop_path_rate > 0.0 else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.drop_path2(self.fc2(self.act(self.fc1(self.norm2(x)))))


class TimmStack(nn.Module):
    """Blocks whose drop-path rates grow linearly to ``drop_path_rate``, as timm's
    ``VisionTransformer`` sets them (``torch.linspace(0, rate, depth)``)."""

    def __init__(self, depth: int = 4, dim: int = 16, drop_path_rate: float = 0.1) -> None:
        super().__init__()
        rates = [x.item() for x in torch.linspace(0, drop_path_rate, depth)]
        self.blocks = nn.Sequential(*[MlpBlock(dim, r) for r in rates])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.blocks(x)


class Power(nn.Module):
    """A block raising its input to ``exponent`` (ATen picks a kernel for 2 and 3)."""

    def __init__(self, dim: int, exponent: float) -> None:
        super().__init__()
        self.fc = nn.Linear(dim, dim)
        self.exponent = exponent

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x).abs().pow(self.exponent)
