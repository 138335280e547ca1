"""What one compiled module costs a step that compiling does not speed up: the per-call
price of a ``torch.compile`` region (guards, the AOTAutograd wrapper, the graph's launch),
forward and backward, on a training step too small for the GPU to hide it (GPU machine).

    PYTHONPATH=/tmp/site:$PWD python bench/compiled_call_cost.py --out OUT

A stack of ``--blocks`` blocks (``nn.Linear(256, 256)`` then ``nn.GELU``), batch 8, bf16
autocast, forward, ``sum().backward()``; variants interleaved round by round: eager; every
block's Linear compiled as ``--verify`` compiles a torch.nn built-in
(:func:`torch_nsight.capture.fixes.toggle.compile_forward`); every GELU likewise; each block
``torch.compile``-d whole. Per variant: the median step (CUDA-synchronised wall time), the
extra time per compiled call against eager, and Dynamo's recompile and graph counters.
Model-free: it calibrates no model's finding, only what a compiled region costs.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch
from torch import nn

from torch_nsight.capture.fixes.toggle import compile_forward


def _model(blocks: int) -> nn.Module:
    return nn.Sequential(*[nn.Sequential(nn.Linear(256, 256), nn.GELU())
                           for _ in range(blocks)]).cuda()


def _step(model: nn.Module, x: torch.Tensor) -> None:
    with torch.autocast("cuda", torch.bfloat16):
        y = model(x)
    y.float().sum().backward()


def _time(model: nn.Module, x: torch.Tensor, steps: int) -> list[float]:
    times = []
    for _ in range(steps):
        torch.cuda.synchronize()
        started = time.perf_counter()
        _step(model, x)
        torch.cuda.synchronize()
        times.append((time.perf_counter() - started) * 1e3)
    return times


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--blocks", type=int, default=12)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=40)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    from torch._dynamo.utils import counters

    x = torch.randn(8, 256, device="cuda")
    models = {name: _model(args.blocks) for name in ("eager", "linear", "gelu", "block")}
    for block in models["linear"]:
        compile_forward(block[0], {}).on()
    for block in models["gelu"]:
        compile_forward(block[1], {}).on()
    for block in models["block"]:
        block.compile()
    record: dict[str, object] = {"device": torch.cuda.get_device_name(),
                                 "torch": torch.__version__, "blocks": args.blocks}
    for name, model in models.items():  # warm-up: compiles
        counters.clear()
        _time(model, x, 10)
        record[f"{name}_dynamo"] = {k: dict(v) for k, v in counters.items()
                                    if k in ("stats", "recompiles", "frames")}
    steps: dict[str, list[float]] = {name: [] for name in models}
    for _ in range(args.rounds):
        for name, model in models.items():
            steps[name].extend(_time(model, x, args.steps))
    eager = statistics.median(steps["eager"])
    for name in models:
        median = statistics.median(steps[name])
        record[name] = {"median_ms": round(median, 4),
                        "per_compiled_call_us": round((median - eager) * 1e3 / args.blocks, 1)}
    print(json.dumps(record, indent=1))
    (args.out / "compiled_call_cost.json").write_text(json.dumps(record, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
