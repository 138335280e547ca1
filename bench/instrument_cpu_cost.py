"""Python cost of ``torch_nsight.instrument`` per module call, on the CPU (no GPU needed).

    PYTHONPATH=$PWD python bench/instrument_cpu_cost.py [--modules 200] [--rounds 9]
        [--baseline HEAD]

No NVTX tool is attached here, so the ``nvtx`` package hands out a do-nothing domain, as it
does on a GPU machine without a profiler: what is measured is exactly the Python work that
instrumentation adds to each module call. The model is a chain of tiny ``nn.Linear(8, 8)``
layers (batch 1) inside one ``nn.Sequential``, so the step time is dominated by per-call
overhead; each line gives the median time per module call and the extra over plain:

* ``plain``: the model as is (forward under ``no_grad``);
* ``2 empty hooks``: an empty forward pre-hook and forward hook on every module, the floor
  of PyTorch's own module-hook machinery;
* ``instrument fwd (no_grad)``: ``instrument(enabled=True)``, forward under ``no_grad``,
  the decode path;
* ``train plain`` / ``train instrument``: forward + ``backward()`` with gradients, the
  training path (forward and backward ranges).

A GPT-2-like model (``GPT2Small(n_layer=2)``, batch 2, seq 64) gives the training-step
cost on a real model shape as well. With ``--baseline REV_OR_DIR`` the two ``instrument``
lines are also timed for the package at that git revision or in that folder (see
``bench/instrument_overhead.py``), interleaved with the rest.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch_nsight  # noqa: E402
from bench.instrument_overhead import load_baseline  # noqa: E402
from examples.models import GPT2Small  # noqa: E402


@contextlib.contextmanager
def empty_hooks(model: nn.Module) -> Iterator[None]:
    handles = []
    for module in model.modules():
        handles.append(module.register_forward_pre_hook(lambda *args: None))
        handles.append(module.register_forward_hook(lambda *args: None))
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


def median_seconds(step: Callable[[], None], repeat: int, rounds: int) -> float:
    step()
    samples = []
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(repeat):
            step()
        samples.append((time.perf_counter() - start) / repeat)
    return statistics.median(samples)


def chain_costs(modules: int, rounds: int, baseline: Any = None,
                rev: str = "") -> list[tuple[str, float, float | None]]:
    torch.manual_seed(0)
    model = nn.Sequential(*(nn.Linear(8, 8) for _ in range(modules)))
    calls = modules + 1  # the Sequential itself
    x = torch.randn(1, 8)
    x_grad = torch.randn(1, 8, requires_grad=True)

    def forward() -> None:
        with torch.no_grad():
            model(x)

    def train() -> None:
        model(x_grad).sum().backward()

    variants: list[tuple[str, Callable[[], None], Callable[[], contextlib.AbstractContextManager]]] = [
        ("plain", forward, contextlib.nullcontext),
        ("2 empty hooks", forward, lambda: empty_hooks(model)),
        ("instrument fwd (no_grad)", forward,
         lambda: torch_nsight.instrument(model, enabled=True)),
        ("train plain", train, contextlib.nullcontext),
        ("train instrument", train, lambda: torch_nsight.instrument(model, enabled=True)),
    ]
    if baseline is not None:
        variants += [
            (f"instrument fwd (no_grad) @{rev}", forward,
             lambda: baseline.instrument(model, enabled=True)),
            (f"train instrument @{rev}", train, lambda: baseline.instrument(model, enabled=True)),
        ]
    times: dict[str, list[float]] = {name: [] for name, _, _ in variants}
    for _ in range(rounds):  # interleaved, so drift hits every variant alike
        for name, step, context in variants:
            with context():
                times[name].append(median_seconds(step, repeat=20, rounds=3) / calls)
    out = []
    for name, _, _ in variants:
        base = "train plain" if name.startswith("train") else "plain"
        median = statistics.median(times[name])
        extra = None if name == base else median - statistics.median(times[base])
        out.append((name, median, extra))
    return out


def gpt2_costs(rounds: int) -> tuple[float, float, int]:
    torch.manual_seed(0)
    model = GPT2Small(n_layer=2)
    ids = torch.randint(0, model.vocab, (2, 64))
    calls = sum(1 for _ in model.modules())

    def step() -> None:
        logits = model(ids)
        F.cross_entropy(logits.view(-1, logits.shape[-1]), ids.view(-1)).backward()
        model.zero_grad(set_to_none=True)

    plain, instrumented = [], []
    for _ in range(rounds):
        plain.append(median_seconds(step, repeat=3, rounds=3))
        with torch_nsight.instrument(model, enabled=True):
            instrumented.append(median_seconds(step, repeat=3, rounds=3))
    return statistics.median(plain), statistics.median(instrumented), calls


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--modules", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--no-gpt2", action="store_true", help="skip the GPT-2-like step")
    parser.add_argument("--baseline", metavar="REV_OR_DIR",
                        help="also time the package at this git revision (e.g. HEAD) or in "
                             "this folder")
    parser.add_argument("--baseline-label", help="its name in the table (default: REV_OR_DIR)")
    args = parser.parse_args()
    baseline = load_baseline(args.baseline) if args.baseline else None
    torch.set_num_threads(1)
    print(f"torch {torch.__version__}; chain of {args.modules} nn.Linear(8, 8), batch 1")
    print("| variant | µs per module call | extra µs per call |")
    print("|---|---:|---:|")
    for name, median, extra in chain_costs(args.modules, args.rounds, baseline,
                                           args.baseline_label or args.baseline or ""):
        extra_text = "" if extra is None else f"{extra * 1e6:+.2f}"
        print(f"| {name} | {median * 1e6:.2f} | {extra_text} |")
    if not args.no_gpt2:
        plain, instrumented, calls = gpt2_costs(max(3, args.rounds // 2))
        print(f"\nGPT2Small(n_layer=2), batch 2, seq 64, {calls} modules, training step: "
              f"plain {plain * 1e3:.2f} ms, instrument(enabled=True) {instrumented * 1e3:.2f} "
              f"ms ({(instrumented / plain - 1) * 100:+.1f}%, "
              f"{(instrumented - plain) / calls * 1e6:+.2f} µs per module call)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
