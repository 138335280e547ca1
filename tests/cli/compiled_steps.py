"""A small compiled training loop for the compiled dry runs of
``tests/cli/test_profile_compiled.py``: ``python compiled_steps.py MODE`` with MODE one of
``eager``, ``whole``, ``block``, ``dynamic``, ``fullgraph``; on a GPU where one is visible. At the end of each step it prints the graph breaks
Dynamo has counted so far (``graph breaks: N``)."""

from __future__ import annotations

import sys

import torch
from torch import nn

import torch_nsight


class Block(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.fc1 = nn.Linear(width, 2 * width)
        self.fc2 = nn.Linear(2 * width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.fc2(torch.relu(self.fc1(self.norm(x))))


class Net(nn.Module):
    def __init__(self, width: int = 16, depth: int = 2) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(Block(width) for _ in range(depth))
        self.head = nn.Linear(width, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        return self.head(x).mean(1)


def main(mode: str) -> int:
    from torch._dynamo.utils import counters

    torch.manual_seed(0)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model: nn.Module = Net().to(device)
    torch_nsight.instrument(model)
    if mode == "eager":
        pass
    elif mode == "whole":
        model = torch.compile(model)
    elif mode == "dynamic":
        model = torch.compile(model, dynamic=True)
    elif mode == "fullgraph":
        model = torch.compile(model, fullgraph=True)
    elif mode == "block":
        blocks = model.blocks  # type: ignore[union-attr]
        for i, block in enumerate(blocks):
            blocks[i] = torch.compile(block)
    else:
        raise SystemExit(f"unknown mode {mode}")
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for i in range(6):
        with torch_nsight.step():
            x = torch.randn(2, 4 + i % 2, 16, device=device)  # two lengths: dynamic shapes
            loss = model(x).pow(2).mean()
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            # inside the step: a dry run stops the script as soon as its last chosen step
            # ends, which could come before a line printed after it
            print(f"graph breaks: {sum(counters['graph_break'].values())}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1]))
