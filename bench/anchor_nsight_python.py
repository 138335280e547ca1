"""The anchor for bench/sweep_vs_anchors.py (a): NVIDIA nsight-python 0.9.6 timing the five
projection GEMMs of the Llama-style block, one hand-written annotation per GEMM, duration
only, 3 runs, seq 256/1024/4096. nsight-python re-launches this whole script under ncu.

    PYTHONPATH=$PWD python bench/anchor_nsight_python.py
"""

from __future__ import annotations

import sys
from pathlib import Path

import nsight
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from examples.models import LlamaBlock  # noqa: E402

model = LlamaBlock().cuda().to(torch.bfloat16)


@nsight.analyze.kernel(configs=[256, 1024, 4096], runs=3, output="quiet", thermal_mode="off")
def projections(seq: int) -> None:
    x = torch.randn(1, seq, 1024, device="cuda", dtype=torch.bfloat16)
    h = torch.randn(1, seq, 2816, device="cuda", dtype=torch.bfloat16)
    with torch.no_grad():
        with nsight.annotate("qkv_proj"):
            model.self_attn.qkv_proj(x)
        with nsight.annotate("o_proj"):
            model.self_attn.o_proj(x)
        with nsight.annotate("gate_proj"):
            model.mlp.gate_proj(x)
        with nsight.annotate("up_proj"):
            model.mlp.up_proj(x)
        with nsight.annotate("down_proj"):
            model.mlp.down_proj(h)


if __name__ == "__main__":
    result = projections()
    frame = result.to_dataframe()
    print(f"nsight-python rows: {len(frame)}", file=sys.stderr)
