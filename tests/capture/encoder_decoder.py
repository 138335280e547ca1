"""A tiny encoder-decoder shaped like Whisper's (transformers' ``WhisperForConditionalGeneration``:
features in, labels in, loss out; called with keyword arguments, optional arguments left
out), for the compile tests of ``test_compiled_program.py`` and the script
``compiled_seq2seq.py``. With ``graph_break`` every layer breaks Dynamo's graph in its
forward, as some of transformers' layers do."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

WIDTH, FEATURES, VOCAB = 16, 8, 32


class Attention(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.q, self.k, self.v, self.o = (nn.Linear(WIDTH, WIDTH) for _ in range(4))

    def forward(self, hidden: torch.Tensor, key_value: torch.Tensor | None = None,
                attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        source = hidden if key_value is None else key_value
        scores = self.q(hidden) @ self.k(source).transpose(-1, -2) / math.sqrt(WIDTH)
        if attention_mask is not None:
            scores = scores + attention_mask
        return self.o(torch.softmax(scores, dim=-1) @ self.v(source))


class Layer(nn.Module):
    def __init__(self, *, cross: bool, graph_break: bool) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(WIDTH)
        self.self_attn = Attention()
        self.cross_attn = Attention() if cross else None
        self.mlp = nn.Sequential(nn.Linear(WIDTH, 2 * WIDTH), nn.GELU(),
                                 nn.Linear(2 * WIDTH, WIDTH))
        self.graph_break = graph_break

    def forward(self, hidden: torch.Tensor, encoder_hidden: torch.Tensor | None = None,
                attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        hidden = hidden + self.self_attn(self.norm(hidden), attention_mask=attention_mask)
        if self.cross_attn is not None:
            hidden = hidden + self.cross_attn(hidden, key_value=encoder_hidden)
        if self.graph_break:
            torch._dynamo.graph_break()
        return hidden + self.mlp(hidden)


class Encoder(nn.Module):
    def __init__(self, graph_break: bool) -> None:
        super().__init__()
        self.proj = nn.Linear(FEATURES, WIDTH)
        self.layers = nn.ModuleList([Layer(cross=False, graph_break=graph_break)])

    def forward(self, input_features: torch.Tensor) -> torch.Tensor:
        hidden = self.proj(input_features)
        for layer in self.layers:
            hidden = layer(hidden)
        return hidden


class Decoder(nn.Module):
    def __init__(self, graph_break: bool) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, WIDTH)
        self.layers = nn.ModuleList(Layer(cross=True, graph_break=graph_break)
                                    for _ in range(2))

    def forward(self, input_ids: torch.Tensor, encoder_hidden: torch.Tensor | None = None,
                attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        hidden = self.embed(input_ids)
        for layer in self.layers:
            hidden = layer(hidden, encoder_hidden=encoder_hidden, attention_mask=attention_mask)
        return hidden


class EncoderDecoder(nn.Module):
    def __init__(self, graph_break: bool = False) -> None:
        super().__init__()
        self.encoder = Encoder(graph_break)
        self.decoder = Decoder(graph_break)
        self.head = nn.Linear(WIDTH, VOCAB, bias=False)

    def forward(self, input_features: torch.Tensor,
                decoder_input_ids: torch.Tensor | None = None,
                labels: torch.Tensor | None = None,
                attention_mask: torch.Tensor | None = None) -> dict[str, torch.Tensor | None]:
        encoded = self.encoder(input_features)
        if decoder_input_ids is None:  # the labels shifted right, as Whisper does
            assert labels is not None
            decoder_input_ids = F.pad(labels[:, :-1], (1, 0), value=1)
        logits = self.head(self.decoder(decoder_input_ids, encoder_hidden=encoded,
                                        attention_mask=attention_mask))
        loss = (None if labels is None
                else F.cross_entropy(logits.flatten(0, 1), labels.flatten()))
        return {"loss": loss, "logits": logits}


def batch(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(input features, labels) of one step."""
    generator = torch.Generator().manual_seed(seed)
    return (torch.randn(2, 6, FEATURES, generator=generator),
            torch.randint(2, VOCAB, (2, 5), generator=generator))
