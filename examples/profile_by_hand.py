"""Profile an instrumented model by hand under Nsight Compute, as a user would.

    ncu --nvtx --nvtx-include "torch_nsight@measure" --clock-control none \\
        --section SpeedOfLight -o block python examples/profile_by_hand.py llama --backward

The script instruments the model, runs warm-up iterations outside any range, then runs one
measured iteration inside the start/end range ``measure`` (domain ``torch_nsight``) that
the ``--nvtx-include`` filter above selects. A start/end range, unlike a push/pop range,
also covers the backward kernels that autograd launches from its own thread. Then:

    python -c "import torch_nsight; print(torch_nsight.load('block.ncu-rep').hotspots())"
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import nvtx
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch_nsight  # noqa: E402
from examples.models import GPT2Small, LlamaBlock, SmallConvNet  # noqa: E402
from torch_nsight.naming import DOMAIN, MEASURE_MESSAGE, format_measure_range  # noqa: E402

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def build(case: str, batch: int, seq: int, dtype: torch.dtype, device: str):
    """Return (model, inputs, shape label) for one of the reference models."""
    if case == "llama":
        model = LlamaBlock()
        inputs = torch.randn(batch, seq, model.hidden)
        label = f"{batch}x{seq}"
    elif case == "gpt2":
        model = GPT2Small()
        inputs = torch.randint(0, model.vocab, (batch, seq))
        label = f"{batch}x{seq}"
    elif case == "convnet":
        model = SmallConvNet().eval()
        inputs = torch.randn(batch, 3, seq, seq)
        label = f"{batch}x3x{seq}x{seq}"
    else:
        raise SystemExit(f"unknown model {case!r}: choose llama, gpt2 or convnet")
    model = model.to(device=device, dtype=dtype)
    if inputs.is_floating_point():
        inputs = inputs.to(dtype)
    return model, inputs.to(device), label


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", choices=["llama", "gpt2", "convnet"])
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--seq", type=int, default=512, help="sequence length or image size")
    parser.add_argument("--dtype", choices=sorted(DTYPES), default="bf16")
    parser.add_argument("--backward", action="store_true")
    parser.add_argument("--ops", action="store_true", help="also name functional ops")
    parser.add_argument("--warmup", type=int, default=2)
    args = parser.parse_args(argv)

    device = "cuda" if torch.cuda.is_available() else "cpu"
    model, inputs, label = build(args.model, args.batch, args.seq, DTYPES[args.dtype], device)
    with torch_nsight.instrument(model, ops=args.ops, enabled=True):
        for step in range(args.warmup + 1):
            measured = step == args.warmup
            if measured:
                if device == "cuda":
                    torch.cuda.synchronize()
                ranges = [nvtx.start_range(MEASURE_MESSAGE, domain=DOMAIN),
                          nvtx.start_range(format_measure_range(shape=label), domain=DOMAIN)]
            out = model(inputs)
            if args.backward:
                out.float().mean().backward()
                model.zero_grad(set_to_none=True)
            if measured:
                if device == "cuda":
                    torch.cuda.synchronize()
                for handle in reversed(ranges):
                    nvtx.end_range(handle)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
