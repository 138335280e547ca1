"""Timeline cost and focused sweeps, whole processes timed from outside (GPU machine).

    python bench/timeline_and_focus.py OUT_DIR

* bare: the GPT-2-small-sized model of examples/ (bf16) running its steps, no profiler;
* timeline: ``torch-nsight timeline`` of the same steps (PyTorch's profiler, no ncu);
* sweep: ``torch-nsight sweep`` of one forward shape, every kernel under ncu;
* focused: the same with ``--focus 0.9``: a timeline first, ncu only on the kernel
  functions carrying 90% of GPU time.

Writes ``results.json``: wall seconds per run, and for the sweeps the share of GPU time and
of kernel rows deep-profiled.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

BARE = """
import sys, time, torch
sys.path.insert(0, {root!r})
from bench.timeline_and_focus import gpt2, ids
model = gpt2()
x = ids({shape}).cuda()
for _ in range({steps}):
    out = model(x)
    {backward}
    torch.cuda.synchronize()
"""


def gpt2() -> torch.nn.Module:
    """examples.models.GPT2Small in bf16."""
    from examples.models import GPT2Small

    return GPT2Small().to(torch.bfloat16).cuda()


def ids(shape: tuple[int, ...]) -> torch.Tensor:
    """Token ids of the given (batch, seq)."""
    return torch.randint(0, 50257, tuple(shape))


def timed(command: list[str], log: Path | None = None) -> tuple[float, int]:
    start = time.perf_counter()
    with open(log, "w") if log else open(os.devnull, "w") as sink:
        code = subprocess.run(command, cwd=ROOT, stdout=sink, stderr=subprocess.STDOUT
                              ).returncode
    return time.perf_counter() - start, code


def deep_share(folder: Path) -> dict[str, float]:
    import torch_nsight

    k = torch_nsight.load(folder, cache=False).kernels
    deep = k["deep_profiled"].fillna(True).astype(bool) if "deep_profiled" in k else \
        k["duration_ns"].notna()
    return {"rows": int(len(k)), "deep_rows": int(deep.sum()),
            "deep_time_pct": float(100 * k.loc[deep, "duration_ns"].sum()
                                   / k["duration_ns"].sum())}


def main() -> int:
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "bench_out").resolve()
    out.mkdir(parents=True, exist_ok=True)
    cli = [sys.executable, "-m", "torch_nsight"]
    target, inputs = "bench/timeline_and_focus.py:gpt2", "bench/timeline_and_focus.py:ids"
    results = {}
    for name, shape, backward in (("train", "8x512", True), ("decode", "1x1", False)):
        dims = tuple(int(d) for d in shape.split("x"))
        bare = BARE.format(root=str(ROOT), shape=dims, steps=10,
                           backward="out.float().mean().backward()" if backward else "")
        results[f"bare_{name}"] = timed([sys.executable, "-c", bare])
        results[f"timeline_{name}"] = timed(
            [*cli, "timeline", target, "--inputs", inputs, "--shapes", shape, "--runs", "5",
             *(["--backward"] if backward else []), "--out", str(out / f"tl_{name}"),
             "--force"])
    for name, extra in (("sweep", []), ("focused", ["--focus", "0.9"])):
        folder = out / name
        results[name] = timed([*cli, "sweep", target, "--inputs", inputs, "--shapes", "4x512",
                               "--out", str(folder), "--force", *extra], out / f"{name}.log")
        results[f"{name}_share"] = deep_share(folder)
        print(name, results[name], results[f"{name}_share"], flush=True)
    (out / "results.json").write_text(json.dumps(results, indent=1))
    print(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
