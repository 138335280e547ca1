"""Small CPU models for the collect tests (imported by reference in the child)."""

from __future__ import annotations

import time

import torch
from torch import nn


class Block(nn.Module):
    """Norm -> MLP -> residual -> norm."""

    def __init__(self, d: int = 16) -> None:
        super().__init__()
        self.n1 = nn.LayerNorm(d)
        self.fc1 = nn.Linear(d, 2 * d)
        self.fc2 = nn.Linear(2 * d, d)
        self.n2 = nn.LayerNorm(d)
        self.extra = False  # when True this block runs one more op (a structural twin that differs)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.fc2(torch.relu(self.fc1(self.n1(x))))
        if self.extra:
            x = x * 2
        return self.n2(x)


class Stack(nn.Module):
    """``layers`` identical blocks: the replication case."""

    def __init__(self, layers: int = 4, d: int = 16) -> None:
        super().__init__()
        self.h = nn.ModuleList(Block(d) for _ in range(layers))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.h:
            x = block(x)
        return x


class TwoInputs(nn.Module):
    """Takes ``x`` and keyword ``scale``."""

    def __init__(self, d: int = 16) -> None:
        super().__init__()
        self.fc = nn.Linear(d, d)

    def forward(self, x: torch.Tensor, scale: torch.Tensor | None = None) -> torch.Tensor:
        out = self.fc(x)
        return out * scale if scale is not None else out


def make_inputs_failing_on_4(shape: tuple[int, ...]) -> torch.Tensor:
    """Inputs for ``shape``; shape (4, 16) fails the way a too-large shape would."""
    if shape[0] == 4:
        raise RuntimeError("CUDA out of memory (simulated)")
    return torch.randn(shape)


def make_inputs_hanging_on_3(shape: tuple[int, ...]) -> torch.Tensor:
    """Inputs for ``shape``; shape (3, 16) never returns (a hung shape)."""
    if shape[0] == 3:
        time.sleep(3600)
    return torch.randn(shape)
