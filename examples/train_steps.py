"""A small training loop with its steps marked, for ``torch-nsight profile --steps``.

    torch-nsight profile --steps 3:5 -- python examples/train_steps.py --steps 8

A Llama-style block (hidden 256), bf16, AdamW: each iteration runs inside
``torch_nsight.step()``, and the model is wrapped in ``torch_nsight.instrument()`` (which
installs its ranges only when a profiler is attached).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch_nsight  # noqa: E402
from torch_nsight.demo.llama import LlamaBlock  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--seq", type=int, default=256)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("train_steps.py: no CUDA GPU is visible; this example trains on the GPU",
              file=sys.stderr)
        return 1
    torch.manual_seed(0)
    model = LlamaBlock(256, 4, 704).to("cuda", torch.bfloat16)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x = torch.randn(2, args.seq, 256, device="cuda", dtype=torch.bfloat16)
    with torch_nsight.instrument(model):
        for _ in range(args.steps):
            with torch_nsight.step():
                loss = model(x).float().pow(2).mean()
                loss.backward()
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
