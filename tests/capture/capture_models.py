"""Models and a range recorder shared by the capture-stage tests (CPU only)."""

from __future__ import annotations

import threading
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from torch_nsight.capture import Instrumentation, RecordingEmitter, instrument


class Recorder:
    """Instruments models with a :class:`RecordingEmitter` and renders what it saw."""

    def __init__(self) -> None:
        self.emitter = RecordingEmitter()
        self.handles: list[Instrumentation] = []

    def instrument(self, model: nn.Module, **options: Any) -> Instrumentation:
        options.setdefault("enabled", True)
        handle = instrument(model, emitter=self.emitter, **options)
        self.handles.append(handle)
        return handle

    @property
    def events(self) -> list[tuple[int, str, str]]:
        return self.emitter.events

    def clear(self) -> None:
        self.emitter.clear()

    def lines(self, thread: int | None = None) -> list[str]:
        """One line per range opened on ``thread`` (default: this one), indented by depth.

        Fails the test if the ranges on that thread do not balance.
        """
        thread = threading.get_ident() if thread is None else thread
        out, open_ = [], []
        for tid, kind, message in self.events:
            if tid != thread:
                continue
            if kind == "push":
                out.append("  " * len(open_) + message)
                open_.append(message)
            else:
                assert open_, f"pop of {message!r} with nothing open"
                assert open_.pop() == message
        assert not open_, f"ranges left open on the thread: {open_}"
        return out

    def threads(self) -> set[int]:
        return {tid for tid, _, _ in self.events}


# -- models ---------------------------------------------------------------------------------


class _Probe(torch.autograd.Function):
    """Identity whose backward writes a marker range: shows where a gradient is computed."""

    @staticmethod
    def forward(ctx: Any, tensor: torch.Tensor, label: str, emitter: RecordingEmitter) -> Any:
        ctx.label, ctx.emitter = label, emitter
        return tensor.clone()

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> Any:
        ctx.emitter.push(ctx.label)
        ctx.emitter.pop()
        return grad, None, None


class ProbedLinear(nn.Linear):
    """A Linear that marks, with ``probe()``, where its weight gradient is computed."""

    probe_label: str | None = None
    probe_emitter: RecordingEmitter | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        weight = self.weight
        if self.probe_emitter is not None:
            weight = _Probe.apply(weight, self.probe_label, self.probe_emitter)
        return F.linear(x, weight, self.bias)


def probe(model: nn.Module, emitter: RecordingEmitter) -> None:
    """Make every ProbedLinear of ``model`` mark its weight gradient as ``w:<name>``."""
    for name, module in model.named_modules():
        if isinstance(module, ProbedLinear):
            module.probe_label, module.probe_emitter = f"w:{name}", emitter


class MLP(nn.Module):
    def __init__(self, dim: int = 8, linear: type[nn.Linear] = nn.Linear) -> None:
        super().__init__()
        self.gate = linear(dim, dim)
        self.up = linear(dim, dim)
        self.down = linear(dim, dim)
        self.act = nn.SiLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(self.act(self.gate(x)) * self.up(x))


class Attention(nn.Module):
    def __init__(self, dim: int = 8, heads: int = 2) -> None:
        super().__init__()
        self.heads = heads
        self.q_proj = nn.Linear(dim, dim, bias=False)
        self.k_proj = nn.Linear(dim, dim, bias=False)
        self.v_proj = nn.Linear(dim, dim, bias=False)
        self.o_proj = nn.Linear(dim, dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        q, k, v = (p(x).view(b, s, self.heads, d // self.heads).transpose(1, 2)
                   for p in (self.q_proj, self.k_proj, self.v_proj))
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.o_proj(out.transpose(1, 2).reshape(b, s, d))


class Block(nn.Module):
    """A Llama-style decoder block: RMSNorm, attention, RMSNorm, gated MLP, residuals."""

    def __init__(self, dim: int = 8) -> None:
        super().__init__()
        self.input_layernorm = nn.RMSNorm(dim)
        self.self_attn = Attention(dim)
        self.post_attention_layernorm = nn.RMSNorm(dim)
        self.mlp = MLP(dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x + self.self_attn(self.input_layernorm(x))
        return h + self.mlp(self.post_attention_layernorm(h))


STACK_FORWARD = [
    "Stack",
    "  inp",
    "  layers.0",
    "    layers.0.gate",
    "    layers.0.act",
    "    layers.0.up",
    "    layers.0.down",
    "  layers.1",
    "    layers.1.gate",
    "    layers.1.act",
    "    layers.1.up",
    "    layers.1.down",
]
"""What an instrumented :class:`Stack` forward records."""


class Stack(nn.Module):
    """An input projection and a stack of MLPs, built from ProbedLinear layers."""

    def __init__(self, layers: int = 2, dim: int = 8) -> None:
        super().__init__()
        self.inp = ProbedLinear(4, dim)
        self.layers = nn.ModuleList(MLP(dim, ProbedLinear) for _ in range(layers))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.inp(x)
        for layer in self.layers:
            h = layer(h)
        return h


class BasicBlock(nn.Module):
    """torchvision's ResNet basic block: in-place ReLUs and ``out += identity``."""

    def __init__(self, channels: int = 4, downsample: bool = False) -> None:
        super().__init__()
        stride = 2 if downsample else 1
        self.conv1 = nn.Conv2d(channels, channels, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(channels, channels, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)
        self.downsample = (nn.Sequential(nn.Conv2d(channels, channels, 1, stride, bias=False),
                                         nn.BatchNorm2d(channels)) if downsample else None)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x
        out = self.relu(self.bn1(self.conv1(x)))  # the shared ReLU runs twice
        out = self.bn2(self.conv2(out))
        if self.downsample is not None:
            identity = self.downsample(x)
        out += identity
        return self.relu(out)


class TinyResNet(nn.Module):
    """A stem and two basic blocks (one downsampling), pooling and a classifier."""

    def __init__(self, channels: int = 4, classes: int = 3) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, channels, 3, padding=1, bias=False),
                                  nn.BatchNorm2d(channels), nn.ReLU(inplace=True))
        self.layer1 = BasicBlock(channels)
        self.layer2 = BasicBlock(channels, downsample=True)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(channels, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.layer2(self.layer1(self.stem(x)))
        return self.fc(torch.flatten(self.pool(x), 1))


class ConvNet(nn.Module):
    """Three conv/batch-norm/ReLU(inplace) stages in ``nn.Sequential``, pooling, a classifier
    (the shape of ``examples.models.SmallConvNet``, small)."""

    def __init__(self, width: int = 4, classes: int = 3) -> None:
        super().__init__()

        def stage(cin: int, cout: int) -> nn.Sequential:
            return nn.Sequential(nn.Conv2d(cin, cout, 3, stride=2, padding=1, bias=False),
                                 nn.BatchNorm2d(cout), nn.ReLU(inplace=True))

        self.features = nn.Sequential(stage(3, width), stage(width, 2 * width),
                                      stage(2 * width, 4 * width))
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(4 * width, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.flatten(self.pool(self.features(x)), 1))


class Ranges:
    """The start/end range emitter ``step()`` takes, recording nothing (its ranges' handles
    are their messages)."""

    def start_range(self, message: str) -> str:
        return message

    def end_range(self, handle: str) -> None:
        pass
