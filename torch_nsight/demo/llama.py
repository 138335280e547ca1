"""The demo model: one Llama-style decoder block, module names as in Hugging Face's Llama.

RMSNorm, a fused QKV projection, scaled-dot-product attention and a SwiGLU MLP. This is the
model of the recorded report (``hidden=1024, heads=16, intermediate=2816``) and of
``torch-nsight demo``; ``examples.models`` re-exports it.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["LlamaAttention", "LlamaMLP", "LlamaBlock"]


class LlamaAttention(nn.Module):
    """Causal self-attention: ``qkv_proj``, fused SDPA, ``o_proj``.

    Args:
        hidden: model width; a multiple of ``heads``.
        heads: attention heads.
    """

    def __init__(self, hidden: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.qkv_proj = nn.Linear(hidden, 3 * hidden, bias=False)
        self.o_proj = nn.Linear(hidden, hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Attend over ``x`` of shape ``(batch, seq, hidden)``; same shape out."""
        batch, seq, hidden = x.shape
        qkv = self.qkv_proj(x).view(batch, seq, 3, self.heads, hidden // self.heads)
        q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.o_proj(out.transpose(1, 2).reshape(batch, seq, hidden))


class LlamaMLP(nn.Module):
    """SwiGLU feed-forward: ``down_proj(silu(gate_proj(x)) * up_proj(x))``.

    Args:
        hidden: model width.
        intermediate: inner width.
    """

    def __init__(self, hidden: int, intermediate: int) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(hidden, intermediate, bias=False)
        self.up_proj = nn.Linear(hidden, intermediate, bias=False)
        self.down_proj = nn.Linear(intermediate, hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Apply the MLP to ``x`` of shape ``(..., hidden)``."""
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class LlamaBlock(nn.Module):
    """One Llama-style decoder block: ``input_layernorm``, ``self_attn.qkv_proj``,
    ``self_attn.o_proj``, ``post_attention_layernorm``, ``mlp.gate_proj``, ``mlp.up_proj``,
    ``mlp.down_proj``. Input: hidden states ``(batch, seq, hidden)``.

    Args:
        hidden: model width.
        heads: attention heads.
        intermediate: the MLP's inner width.
    """

    def __init__(self, hidden: int = 1024, heads: int = 16, intermediate: int = 2816) -> None:
        super().__init__()
        self.hidden = hidden
        self.input_layernorm = nn.RMSNorm(hidden, eps=1e-6)
        self.self_attn = LlamaAttention(hidden, heads)
        self.post_attention_layernorm = nn.RMSNorm(hidden, eps=1e-6)
        self.mlp = LlamaMLP(hidden, intermediate)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Run the block (pre-norm residual attention, then pre-norm residual MLP)."""
        x = x + self.self_attn(self.input_layernorm(x))
        return x + self.mlp(self.post_attention_layernorm(x))
