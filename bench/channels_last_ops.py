"""Does timing a CNN's own convolutions and batch norms in both layouts predict what going
channels-last does to its whole training step? (issue 43, GPU machine)

For each model (``bench/zoo_app.py``'s builders, NCHW): one training step records, through
forward hooks, every ``Conv2d`` and ``BatchNorm2d`` call's input shape and dtype, the weight's
shape and dtype, stride, padding, dilation and groups (what a calls table can hold). Each
distinct call is then timed on fresh random tensors, forward and backward, NCHW and then
channels-last (CUDA events, median of 15 after 5 warm-ups); the prediction is the sum over
calls of (NCHW - channels-last) x calls per step. The truth is the same run's whole step:
the model and its input NCHW, then a copy of both channels-last, alternating 3 rounds of 20
steps after 10 warm-ups (median per round, then the median of the rounds' differences).

    PYTHONPATH=$PWD python bench/channels_last_ops.py --models mobilenet_v3,regnet_y --out OUT

Writes ``OUT/channels_last_ops.json``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))

import zoo_app  # noqa: E402

from torch_nsight.collect import benchmark_fixes  # noqa: E402

CL = torch.channels_last


def _record_calls(model: nn.Module, step: Any) -> Counter:
    """One step's Conv2d and BatchNorm2d calls, by signature."""
    calls: Counter = Counter()

    def conv_hook(module: nn.Conv2d, args: tuple, _out: Any) -> None:
        x = args[0]
        calls[("conv", tuple(x.shape), str(x.dtype).split(".")[-1], tuple(module.weight.shape),
               module.stride, module.padding, module.dilation, module.groups,
               module.bias is not None, x.requires_grad)] += 1

    def bn_hook(module: nn.BatchNorm2d, args: tuple, _out: Any) -> None:
        x = args[0]
        calls[("bn", tuple(x.shape), str(x.dtype).split(".")[-1])] += 1

    handles = [m.register_forward_hook(conv_hook if isinstance(m, nn.Conv2d) else bn_hook)
               for m in model.modules() if isinstance(m, (nn.Conv2d, nn.BatchNorm2d))]
    step(0)
    torch.cuda.synchronize()
    for handle in handles:
        handle.remove()
    return calls


def _timed(fn: Any, samples: int = 15) -> float:
    """ms of one call (the library's own timer: CUDA events, median after warm-ups)."""
    return benchmark_fixes._timed(fn, samples) / 1e6


def _call_fn(key: tuple, layout: torch.memory_format) -> Any:
    dtype = getattr(torch, key[2])
    if key[0] == "conv":
        _, shape, _, wshape, stride, padding, dilation, groups, bias, grad_in = key
        x = torch.randn(shape, device="cuda", dtype=dtype).to(memory_format=layout)
        x.requires_grad_(grad_in)
        w = torch.randn(wshape, device="cuda", dtype=dtype).to(memory_format=layout)
        w.requires_grad_(True)
        b = torch.randn(wshape[0], device="cuda", dtype=dtype, requires_grad=True) if bias \
            else None

        def run() -> None:
            out = F.conv2d(x, w, b, stride, padding, dilation, groups)
            out.backward(torch.ones_like(out))
        return run
    _, shape, _ = key
    x = torch.randn(shape, device="cuda", dtype=dtype).to(memory_format=layout)
    x.requires_grad_(True)
    weight = torch.ones(shape[1], device="cuda", requires_grad=True)
    bias = torch.zeros(shape[1], device="cuda", requires_grad=True)
    mean, var = torch.zeros(shape[1], device="cuda"), torch.ones(shape[1], device="cuda")

    def run_bn() -> None:
        out = F.batch_norm(x, mean, var, weight, bias, training=True)
        out.backward(torch.ones_like(out))
    return run_bn


def _step_times(make: Any, model: nn.Module, steps: int = 20) -> float:
    step = make(model)
    for i in range(10):
        step(i)
    torch.cuda.synchronize()
    times = []
    for i in range(steps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        step(i)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def _build(name: str, layout: torch.memory_format) -> tuple[nn.Module, Any]:
    """zoo_app's model, with the model and its 4-D inputs in ``layout``."""
    model, make = zoo_app.build(name)
    model = model.to(memory_format=layout)
    if layout is CL:  # the closure's input: rebuild the step around converted inputs
        for cell in (make.__closure__ or ()):
            _convert_cells(cell.cell_contents, layout)
    return model, make


def _convert_cells(value: Any, layout: torch.memory_format, depth: int = 0) -> None:
    """Convert 4-D CUDA tensors held by the step's closures to ``layout`` in place."""
    if depth > 3:
        return
    if callable(value) and getattr(value, "__closure__", None):
        for cell in value.__closure__:
            contents = cell.cell_contents
            if isinstance(contents, torch.Tensor) and contents.dim() == 4:
                cell.cell_contents = contents.contiguous(memory_format=layout)
            else:
                _convert_cells(contents, layout, depth + 1)


def measure(name: str) -> dict[str, Any]:
    started = time.time()
    model, make = _build(name, torch.contiguous_format)
    calls = _record_calls(model, make(model))
    rows = []
    predicted = 0.0
    for key, count in calls.items():
        nchw = _timed(_call_fn(key, torch.contiguous_format))
        cl = _timed(_call_fn(key, CL))
        predicted += (nchw - cl) * count
        rows.append({"call": [str(k) for k in key], "count": count, "nchw_ms": round(nchw, 4),
                     "cl_ms": round(cl, 4)})
    del model, make
    torch.cuda.empty_cache()
    nchw_model, nchw_make = _build(name, torch.contiguous_format)
    cl_model, cl_make = _build(name, CL)
    rounds = []
    for _ in range(3):
        a = _step_times(nchw_make, nchw_model)
        b = _step_times(cl_make, cl_model)
        rounds.append({"nchw_ms": round(a, 3), "cl_ms": round(b, 3)})
    measured = statistics.median(r["nchw_ms"] - r["cl_ms"] for r in rounds)
    by_kind = {kind: round(sum((r["nchw_ms"] - r["cl_ms"]) * r["count"] for r in rows
                               if r["call"][0] == kind), 3) for kind in ("conv", "bn")}
    return {"model": name, "predicted_ms": round(predicted, 3), "by_kind": by_kind,
            "measured_ms": round(measured, 3), "rounds": rounds, "distinct_calls": len(rows),
            "calls": sum(calls.values()), "rows": rows, "wall_s": round(time.time() - started, 1)}


def run_per_model(description: str, measure_one: Any, out_name: str) -> int:
    """``--models a,b --out OUT``: ``measure_one(model, out)`` for each model (one failing
    keeps the others), its record printed (without ``rows``) and all of them written to
    ``OUT/out_name`` after each."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--models", required=True)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    results = []
    for name in args.models.split(","):
        try:
            result = measure_one(name, args.out)
        except Exception as err:  # one model failing keeps the others
            result = {"model": name, "error": f"{type(err).__name__}: {err}"}
        results.append(result)
        print(json.dumps({k: v for k, v in result.items() if k != "rows"}), flush=True)
        (args.out / out_name).write_text(json.dumps(results, indent=1))
        torch.cuda.empty_cache()
    return 0


def main() -> int:
    return run_per_model(__doc__.splitlines()[0], lambda name, _out: measure(name),
                         "channels_last_ops.json")


if __name__ == "__main__":
    raise SystemExit(main())
