"""Small reference models used by the examples, the GPU tests, the fixtures and the benchmarks.

* :class:`LlamaBlock`: one Llama-style decoder block (RMSNorm, fused QKV projection,
  scaled-dot-product attention, SwiGLU MLP), module names as in Hugging Face's Llama. It is
  the demo's model and ships in the package: defined in :mod:`torch_nsight.demo.llama`,
  re-exported here with its parts (``LlamaAttention``, ``LlamaMLP``).
* :class:`GPT2Small`: a GPT-2-small-sized decoder (12 layers, d=768, 164 modules).
* :class:`SmallConvNet`: a few conv/batch-norm/ReLU stages and a classifier.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from torch_nsight.demo.llama import LlamaAttention, LlamaBlock, LlamaMLP

__all__ = ["LlamaAttention", "LlamaMLP", "LlamaBlock", "GPT2Small", "SmallConvNet"]


class GPT2Attention(nn.Module):
    def __init__(self, d: int, heads: int, dropout: float) -> None:
        super().__init__()
        self.heads = heads
        self.c_attn = nn.Linear(d, 3 * d)
        self.c_proj = nn.Linear(d, d)
        self.attn_dropout = nn.Dropout(dropout)
        self.resid_dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, seq, d = x.shape
        qkv = self.c_attn(x).view(batch, seq, 3, self.heads, d // self.heads)
        q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)
        p = self.attn_dropout.p if self.training else 0.0
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=p)
        return self.resid_dropout(self.c_proj(out.transpose(1, 2).reshape(batch, seq, d)))


class GPT2MLP(nn.Module):
    def __init__(self, d: int, dropout: float) -> None:
        super().__init__()
        self.c_fc = nn.Linear(d, 4 * d)
        self.act = nn.GELU(approximate="tanh")
        self.c_proj = nn.Linear(4 * d, d)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.c_proj(self.act(self.c_fc(x))))


class GPT2Block(nn.Module):
    def __init__(self, d: int, heads: int, dropout: float) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(d)
        self.attn = GPT2Attention(d, heads, dropout)
        self.ln_2 = nn.LayerNorm(d)
        self.mlp = GPT2MLP(d, dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT2Small(nn.Module):
    """A GPT-2-small-sized decoder (no weights loaded). Input: token ids ``(batch, seq)``."""

    def __init__(self, n_layer: int = 12, d: int = 768, heads: int = 12, vocab: int = 50257,
                 max_positions: int = 1024, dropout: float = 0.0) -> None:
        super().__init__()
        self.vocab = vocab
        self.wte = nn.Embedding(vocab, d)
        self.wpe = nn.Embedding(max_positions, d)
        self.drop = nn.Dropout(dropout)
        self.h = nn.ModuleList(GPT2Block(d, heads, dropout) for _ in range(n_layer))
        self.ln_f = nn.LayerNorm(d)
        self.lm_head = nn.Linear(d, vocab, bias=False)
        self.lm_head.weight = self.wte.weight

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(ids.shape[1], device=ids.device)
        x = self.drop(self.wte(ids) + self.wpe(positions))
        for block in self.h:
            x = block(x)
        return self.lm_head(self.ln_f(x))


class SmallConvNet(nn.Module):
    """Three conv/batch-norm/ReLU stages, global pooling and a linear classifier.
    Input: images ``(batch, 3, H, W)``."""

    def __init__(self, width: int = 64, classes: int = 1000) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, width, 7, stride=2, padding=3, bias=False),
                                  nn.BatchNorm2d(width), nn.ReLU(inplace=True))
        self.stage1 = nn.Sequential(nn.Conv2d(width, 2 * width, 3, stride=2, padding=1, bias=False),
                                    nn.BatchNorm2d(2 * width), nn.ReLU(inplace=True))
        self.stage2 = nn.Sequential(nn.Conv2d(2 * width, 4 * width, 3, stride=2, padding=1,
                                              bias=False),
                                    nn.BatchNorm2d(4 * width), nn.ReLU(inplace=True))
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(4 * width, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stage2(self.stage1(self.stem(x)))
        return self.fc(torch.flatten(self.pool(x), 1))
