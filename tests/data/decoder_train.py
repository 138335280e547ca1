"""A decoder training loop as a user writes it (GPU machine), recorded for the findings.

    python tests/data/decoder_train.py [--steps N]

Hugging Face ``GPT2LMHeadModel`` with 2 layers and GPT-2's vocabulary (50257, not a
multiple of 8: the head's GEMM is misaligned forward and backward), random weights, batch 4
x seq 256, bf16 autocast, fused AdamW; the loss is computed inside the model (``labels=``),
so its kernels are the model's own exclusive work. Each iteration is one
``torch_nsight.step()``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch_nsight  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=5)
    args = parser.parse_args()
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(n_layer=2)).cuda()
    torch_nsight.instrument(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    ids = torch.randint(0, 50257, (4, 256), device="cuda")
    for _ in range(args.steps):
        with torch_nsight.step():
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = model(input_ids=ids, labels=ids).loss
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    print(f"decoder_train done: loss {loss.item():.3f}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
