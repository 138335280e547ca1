"""Sweep a Llama-style decoder block over shapes, two attention variants side by side.

    python examples/sweep_llama.py                       # profile under ncu (GPU)
    python examples/sweep_llama.py --dry-run             # check the job first (CPU is fine)
    python examples/sweep_llama.py --backward --out runs/llama --devices 0 1

The ``eager`` variant's attention class is defined here, in ``__main__``: the sweep's job is
pickled with cloudpickle, which carries it to the profiled child by value. Each kernel row
gets a ``tokens_per_s`` column (batch x seq / kernel time), and the speedup of ``sdpa`` over
``eager`` is printed per module. Without a CUDA GPU (or without ``ncu``) it says so in one
line and exits 1; ``--dry-run`` runs anywhere.
"""

from __future__ import annotations

import argparse
import logging
import math
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch_nsight  # noqa: E402
from examples.models import LlamaAttention, LlamaBlock  # noqa: E402
from torch_nsight.errors import TorchNsightError  # noqa: E402

HIDDEN = 1024
PROG = "sweep_llama.py"


class EagerAttention(LlamaAttention):
    """Attention written out (scores, mask, softmax, weighted sum) instead of fused SDPA."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, seq, hidden = x.shape
        qkv = self.qkv_proj(x).view(batch, seq, 3, self.heads, hidden // self.heads)
        q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
        mask = torch.ones(seq, seq, dtype=torch.bool, device=x.device).triu(1)
        out = F.softmax(scores.masked_fill(mask, float("-inf")), dim=-1) @ v
        return self.o_proj(out.transpose(1, 2).reshape(batch, seq, hidden))


def eager_block() -> LlamaBlock:
    """A LlamaBlock whose attention is :class:`EagerAttention`."""
    block = LlamaBlock(hidden=HIDDEN)
    block.self_attn = EagerAttention(HIDDEN, heads=16)
    return block


def tokens_per_s(row, shape: tuple[int, int, int]) -> float:
    """Tokens of the shape over the kernel's time."""
    return shape[0] * shape[1] / (row["duration_ns"] * 1e-9)


def fail(message: str) -> int:
    """Print ``message`` as one line on stderr; return the exit status 1."""
    print(f"{PROG}: error: {' '.join(message.split())}", file=sys.stderr)
    return 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seq", type=int, nargs="+", default=[256, 1024])
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--backward", action="store_true")
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--metric-set", default="roofline", choices=["roofline", "lean", "full"])
    parser.add_argument("--out", type=Path, default=None, help="keep reports and tables here")
    parser.add_argument("--devices", type=int, nargs="*", default=None)
    parser.add_argument("--dry-run", action="store_true", help="run the job without ncu")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    if not args.dry_run and not torch.cuda.is_available():
        return fail("no CUDA GPU is visible: this example profiles under Nsight Compute on a "
                    "GPU; run it with --dry-run to check the job on this machine")

    shapes = [(args.batch, seq, HIDDEN) for seq in args.seq]
    try:
        profile = torch_nsight.sweep(
            {"eager": eager_block, "sdpa": LlamaBlock}, shapes,
            dtype=torch.bfloat16, backward=args.backward, runs=args.runs,
            metric_set=args.metric_set, output_dir=args.out, devices=args.devices,
            derive={"tokens_per_s": tokens_per_s},
            profiler=None if args.dry_run else "ncu")
    except TorchNsightError as err:  # ncu missing, counters not permitted, every shape failed
        return fail(str(err))
    if args.dry_run:
        for result in profile.results:
            print(f"{result['variant']:>6} {result['shape']:>12}: {result['status']}"
                  f" -> {result.get('outputs') or result['error']}")
        return 0 if not profile.failures else 1
    print(profile.normalize(baseline="eager").head(20).to_string())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
