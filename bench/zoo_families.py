"""Four families the zoo lacked, for ``bench/zoo_app.py`` (GPU machine): a detector, a video
network of 3-D convolutions, a state-space language model and a two-tower image-text model.

Added on 2026-11-29 and set to **verify** before any of them ran (``bench/zoo.py``): nothing
was tuned on them. Random weights, nothing downloaded, each with its own training loop as
such scripts are written.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

#: A model and the maker of its step (``bench/zoo_app.py``'s ``MakeStep``).
Built = tuple[nn.Module, Callable[[Callable[..., object]], Callable[[int], object]]]


def _steps(model: nn.Module, loss_of: Callable[[Callable[..., object]], torch.Tensor],
           optimizer: torch.optim.Optimizer, autocast: bool) -> Built:
    def make(run: Callable[..., object]) -> Callable[[int], object]:
        def step(i: int) -> torch.Tensor:
            with torch.autocast("cuda", dtype=torch.bfloat16, enabled=autocast):
                loss = loss_of(run)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            return loss

        return step

    return model, make


def detection(batch: int = 8, size: int = 320, boxes: int = 8) -> Built:
    """torchvision's Faster R-CNN on MobileNetV3 with an FPN (its 320-pixel variant), fp32 as
    torchvision's reference trains it, SGD with momentum: anchors, proposals and non-maximum
    suppression with data-dependent sizes, RoIAlign, four losses."""
    from torchvision.models.detection import fasterrcnn_mobilenet_v3_large_320_fpn

    model = fasterrcnn_mobilenet_v3_large_320_fpn(weights=None, weights_backbone=None,
                                                  num_classes=91).cuda().train()
    generator = torch.Generator().manual_seed(0)
    images = [torch.rand(3, size, size, generator=generator).cuda() for _ in range(batch)]
    targets = []
    for _ in range(batch):
        corner = torch.rand(boxes, 2, generator=generator) * size * 0.7
        extent = torch.rand(boxes, 2, generator=generator) * size * 0.25 + 8
        targets.append({"boxes": torch.cat([corner, corner + extent], 1).cuda(),
                        "labels": torch.randint(1, 91, (boxes,), generator=generator).cuda()})
    optimizer = torch.optim.SGD(model.parameters(), lr=0.02, momentum=0.9, weight_decay=1e-4)
    return _steps(model, lambda run: sum(run(images, targets).values()),  # type: ignore[arg-type,union-attr]
                  optimizer, autocast=False)


def video(batch: int = 8, frames: int = 16, size: int = 112) -> Built:
    """torchvision's R3D-18 (3-D convolutions and batch norms over N x C x T x H x W), NCDHW,
    bf16 autocast, SGD with momentum, as its video classification recipe trains it."""
    from torchvision.models.video import r3d_18

    model = r3d_18(num_classes=400).cuda()
    clips = torch.randn(batch, 3, frames, size, size, device="cuda")
    labels = torch.randint(0, 400, (batch,), device="cuda")
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=1e-4)
    return _steps(model, lambda run: nn.functional.cross_entropy(run(clips), labels),
                  optimizer, autocast=True)


def state_space(batch: int = 8, seq: int = 64) -> Built:
    """transformers' Mamba (2 layers, hidden 512): without the mamba-ssm kernels installed,
    its selective scan runs a Python loop over the sequence, a few launches per token and
    layer; bf16 autocast, AdamW (foreach)."""
    from transformers import MambaConfig, MambaForCausalLM

    config = MambaConfig(hidden_size=512, num_hidden_layers=2, vocab_size=32000,
                         state_size=16)
    model = MambaForCausalLM(config).cuda()
    ids = torch.randint(0, 32000, (batch, seq), device="cuda")
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1)
    return _steps(model, lambda run: run(input_ids=ids, labels=ids).loss,  # type: ignore[attr-defined]
                  optimizer, autocast=True)


def image_text(batch: int = 32) -> Built:
    """transformers' CLIP, small towers (a 6-layer ViT-B/16-style image tower of width 384, a
    4-layer text tower of width 256), its contrastive loss; bf16 autocast, AdamW (foreach)
    with weight decay 0.2 as CLIP's recipe."""
    from transformers import CLIPConfig, CLIPModel

    config = CLIPConfig(
        text_config={"hidden_size": 256, "intermediate_size": 1024, "num_hidden_layers": 4,
                     "num_attention_heads": 4, "max_position_embeddings": 77},
        vision_config={"hidden_size": 384, "intermediate_size": 1536, "num_hidden_layers": 6,
                       "num_attention_heads": 6, "image_size": 224, "patch_size": 16},
        projection_dim=256)
    model = CLIPModel(config).cuda()
    ids = torch.randint(0, config.text_config.vocab_size, (batch, 77), device="cuda")
    pixels = torch.randn(batch, 3, 224, 224, device="cuda")
    optimizer = torch.optim.AdamW(model.parameters(), lr=5e-4, weight_decay=0.2)
    return _steps(model, lambda run: run(input_ids=ids, pixel_values=pixels,  # type: ignore[attr-defined]
                                         return_loss=True).loss, optimizer, autocast=True)


#: zoo_app.py's model name -> its builder.
FAMILIES: dict[str, Callable[[], Built]] = {
    "fasterrcnn": detection, "r3d_18": video, "mamba": state_space, "clip": image_text}
