"""A small DDP training loop with its steps marked, for ``torch-nsight profile --ranks``.

    torchrun --nproc-per-node 2 --no-python \\
        torch-nsight profile --ranks 0 --steps 2:3 -- python examples/train_ddp.py

One Llama-style block (hidden 256) per GPU, bf16, SGD, NCCL all-reduce of the gradients;
each iteration runs inside ``torch_nsight.step()``.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch_nsight  # noqa: E402
from torch_nsight.demo.llama import LlamaBlock  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=5)
    args = parser.parse_args()
    if not torch.cuda.is_available() or "LOCAL_RANK" not in os.environ:
        print("train_ddp.py: run it under torchrun on CUDA GPUs", file=sys.stderr)
        return 1
    rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl")
    torch.manual_seed(0)
    model = LlamaBlock(256, 4, 704).to("cuda", torch.bfloat16)
    ddp = torch.nn.parallel.DistributedDataParallel(model, device_ids=[rank])
    optimizer = torch.optim.SGD(ddp.parameters(), lr=1e-3)
    x = torch.randn(2, 256, 256, device="cuda", dtype=torch.bfloat16)
    with torch_nsight.instrument(model):
        for _ in range(args.steps):
            with torch_nsight.step():
                ddp(x).float().pow(2).mean().backward()
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
