"""A training step recorded by hand, the way a user profiles their own script.

    ncu --nvtx --clock-control none -o run_s128 python tests/data/hand_recorded.py --seq 128
    ncu --nvtx --clock-control none -o plain python tests/data/hand_recorded.py --emit-nvtx

A Llama-style block (hidden 256, 4 heads, MLP 704), bf16, batch 2: one forward and backward
step. By default it is wrapped in ``torch_nsight.instrument(model, record_calls=...)``,
which also writes the calls table beside the report; with ``--emit-nvtx`` it runs under
``torch.autograd.profiler.emit_nvtx()`` instead (ranges named after aten ops, not modules).
No ``measure`` range: the report's rows carry no shape label of their own.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch_nsight  # noqa: E402
from torch_nsight.demo.llama import LlamaBlock  # noqa: E402

HIDDEN, HEADS, INTERMEDIATE, BATCH = 256, 4, 704, 2


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--calls", type=Path, default=None, help="calls file to write")
    parser.add_argument("--emit-nvtx", action="store_true")
    args = parser.parse_args()
    torch.manual_seed(0)
    model = LlamaBlock(HIDDEN, HEADS, INTERMEDIATE).to(torch.bfloat16).to("cuda")
    x = torch.randn(BATCH, args.seq, HIDDEN, dtype=torch.bfloat16).to("cuda")
    torch.cuda.synchronize()
    if args.emit_nvtx:
        ranges = torch.autograd.profiler.emit_nvtx()
    else:
        ranges = torch_nsight.instrument(model, enabled=True, record_calls=args.calls)
    with ranges:
        model(x).float().mean().backward()
        torch.cuda.synchronize()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
