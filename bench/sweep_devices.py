"""One GPU against two for the same sweep (run on a machine with two GPUs and ncu).

    PYTHONPATH=$PWD python bench/sweep_devices.py

A Llama-style block (hidden 1024, bf16), forward, four shapes (seq 512/1024/2048/4096),
default metric set: ``sweep(..., devices=None)`` then ``sweep(..., devices=[0, 1])``; wall
time of each ``sweep()`` call and the kernel rows it returned.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch_nsight  # noqa: E402
from examples.models import LlamaBlock  # noqa: E402

SHAPES = [(1, 512, 1024), (1, 1024, 1024), (1, 2048, 1024), (1, 4096, 1024)]


def main() -> int:
    rows = []
    for devices in (None, [0, 1]):
        start = time.perf_counter()
        profile = torch_nsight.sweep(LlamaBlock, SHAPES, dtype="bf16", devices=devices,
                                     quiet=True)
        seconds = time.perf_counter() - start
        rows.append({"devices": str(devices), "seconds": round(seconds, 1),
                     "rows": len(profile.kernels), "failures": len(profile.failures),
                     "per_shape_total_us": {s: round(v / 1e3, 1) for s, v in
                                            profile.kernels.groupby("shape")["duration_ns"]
                                            .sum().items()}})
    print(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
