"""Record the timeline fixtures (tests/data/timeline_*/) on a CUDA GPU, and time them.

    python tests/data/record_timeline.py OUT_DIR

Three runs of torch_nsight.timeline(), each a timeline directory (manifest + gzip'd Chrome
trace), plus ``timing.json`` (wall time of each timeline() call next to the bare steps):

* ``timeline_decode``: examples.models.GPT2Small (12 layers, d=768), bf16, batch 1, one
  token, forward only: expected launch-bound.
* ``timeline_train``: the same model, bf16, batch 8, seq 512, forward + backward: expected
  GPU-bound.
* ``timeline_copy``: a linear layer fed each step from a 256 MiB pageable host tensor:
  expected copy-bound.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch_nsight  # noqa: E402
from examples.models import GPT2Small  # noqa: E402


class HostFed(nn.Module):
    """A projection whose input is copied each step from pageable host memory."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(1024, 1024)
        self.host = torch.randn(64 * 1024, 1024)  # not a buffer: stays on the host

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(self.host.to(x.device, non_blocking=False)[: x.shape[0]] + x)


def ids(shape: tuple[int, int]) -> torch.Tensor:
    return torch.randint(0, 50257, shape)


def main() -> int:
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "out")
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    cases = {
        "timeline_decode": dict(model=lambda: GPT2Small().eval(), shapes={"1x1": (1, 1)},
                                make_inputs=ids, dtype="bf16"),
        "timeline_train": dict(model=GPT2Small, shapes={"8x512": (8, 512)},
                               make_inputs=ids, dtype="bf16", backward=True),
        "timeline_copy": dict(model=HostFed, shapes={"4096x1024": (4096, 1024)}),
    }
    timing = {}
    for name, case in cases.items():
        start = time.perf_counter()
        profile = torch_nsight.timeline(case.pop("model"), case.pop("shapes"), runs=3,
                                        warmup=2, output_dir=out / name, **case)
        timing[name] = {"timeline_s": time.perf_counter() - start,
                        "kernels": len(profile.kernels)}
        steps = profile.timeline[profile.timeline["kind"] == "step"]
        print(name, len(profile.kernels), "rows;", (steps["busy_ns"] / (steps["end_ns"]
              - steps["start_ns"])).round(3).tolist(), "busy;", steps["bare_ns"].iloc[0],
              steps["ranged_ns"].iloc[0], flush=True)
    (out / "timing.json").write_text(json.dumps(timing, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
