"""Record the findings fixtures (tests/data/findings_*/) on a CUDA GPU.

    python tests/data/record_findings.py OUT_DIR [CASE...]

Each case is a sweep output directory (default metric set, calls table) holding the slow
form and its fix as two variants (or two sweeps where the fix is a global setting), so
that a finding's estimated gain can be checked against the gain measured by profiling the
fix:

* ``findings_gemm``: a bf16 projection 4096x768 @ 768xN, N = 50257 (odd, like GPT-2's
  vocabulary) and N = 50304 (padded to a multiple of 64).
* ``findings_fp32_off`` / ``findings_fp32_on``: an fp32 4096x4096 linear on 4096x4096
  inputs with TF32 off, then on (``torch.backends.cuda.matmul.allow_tf32``).
* ``findings_chain``: GELU written as nine tensor ops, and as the fused
  ``F.gelu(approximate="tanh")``, bf16, 8192x4096 (``torch.compile`` of the chain fell back
  to eager kernels inside the sweep's child, so the fused op is the recorded fix).
* ``findings_conv``: examples.models.SmallConvNet, fp16, eval, 32x3x224x224, NCHW and
  channels-last.
* ``findings_rules``: the NCHW conv net again with ``metric_set="full"`` (ncu's analysis
  sections, whose rules estimate speedups).

``timing.json`` holds each sweep's wall time.
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
from examples.models import SmallConvNet  # noqa: E402


class Projection(nn.Module):
    """A bias-free projection to ``n`` outputs."""

    def __init__(self, n: int) -> None:
        super().__init__()
        self.proj = nn.Linear(768, n, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(x)


class GeluChain(nn.Module):
    """tanh-approximated GELU as separate tensor ops: one kernel each in eager mode.

    Only literals inside: the model travels to the sweep's child by value (this script is
    ``__main__`` there no more), where torch.compile would not find a global of it."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        inner = 0.7978845608028654 * (x + 0.044715 * x * x * x)  # sqrt(2 / pi)
        return 0.5 * x * (1.0 + torch.tanh(inner))


class ChainBlock(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.act = GeluChain()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(x)


class FusedGelu(nn.Module):
    """The same GELU as one fused op (the fix)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.gelu(x, approximate="tanh")


def fused_chain() -> nn.Module:
    block = ChainBlock()
    block.act = FusedGelu()
    return block


def conv_nchw() -> nn.Module:
    return SmallConvNet().eval()


def conv_channels_last() -> nn.Module:
    return SmallConvNet().eval().to(memory_format=torch.channels_last)


def main() -> int:
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "out")
    out.mkdir(parents=True, exist_ok=True)
    chosen = set(sys.argv[2:])
    timing = {}

    def run(name: str, model: object, shapes: list, **options: object) -> None:
        if chosen and name not in chosen:
            return
        start = time.perf_counter()
        try:
            profile = torch_nsight.sweep(model, shapes, output_dir=out / name, **options)
            print(name, profile.describe(), flush=True)
        except Exception as err:  # noqa: BLE001 - record what failed, go on
            print(name, "FAILED", type(err).__name__, err, flush=True)
        timing[name] = time.perf_counter() - start

    run("findings_gemm", {"n50257": lambda: Projection(50257),
                          "n50304": lambda: Projection(50304)}, [(4096, 768)], dtype="bf16")
    torch.backends.cuda.matmul.allow_tf32 = False
    run("findings_fp32_off", lambda: nn.Linear(4096, 4096, bias=False), [(4096, 4096)])
    torch.backends.cuda.matmul.allow_tf32 = True
    run("findings_fp32_on", lambda: nn.Linear(4096, 4096, bias=False), [(4096, 4096)])
    torch.backends.cuda.matmul.allow_tf32 = False
    run("findings_chain", {"eager": ChainBlock, "fused": fused_chain}, [(8192, 4096)],
        dtype="bf16")
    run("findings_conv", {"nchw": conv_nchw, "channels_last": conv_channels_last},
        [(32, 3, 224, 224)], dtype="fp16")
    # Nsight Compute's own rules estimate speedups only with their sections: the full set
    run("findings_rules", conv_nchw, [(32, 3, 224, 224)], dtype="fp16", metric_set="full")
    (out / "timing.json").write_text(json.dumps(timing, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
