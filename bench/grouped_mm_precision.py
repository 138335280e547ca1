"""What a Mixture-of-Experts' grouped GEMM costs by precision (GPU machine): ``torch._grouped_mm``
at the recorded Mixtral- and Qwen2-MoE experts' shapes (``tests/data/zoo_families``), forward and
backward, in float32 with TF32 off and on, and in bfloat16; the kernels each ran, from PyTorch's
profiler. Says whether ``torch.backends.cuda.matmul.allow_tf32`` reaches the grouped GEMM
(the switch ``profile --verify`` measures for ``fp32_no_tensor_cores``) or only a cast does.

    python bench/grouped_mm_precision.py --out OUT
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

#: (name, tokens routed (rows), hidden, expert width, experts): Mixtral-style 8 x 256 tokens
#: top-2 over 8 experts; Qwen2-MoE-style top-4 over 16.
CASES = [("mixtral_moe", 4096, 512, 1024, 8), ("qwen2_moe", 8192, 512, 512, 16)]


def _run(rows: int, hidden: int, width: int, experts: int, dtype: torch.dtype,
         repeats: int = 20) -> tuple[float, list[str]]:
    x = torch.randn(rows, hidden, device="cuda", dtype=dtype, requires_grad=True)
    w1 = torch.randn(experts, hidden, 2 * width, device="cuda", dtype=dtype, requires_grad=True)
    w2 = torch.randn(experts, width, hidden, device="cuda", dtype=dtype, requires_grad=True)
    offs = torch.linspace(rows // experts, rows, experts, device="cuda").to(torch.int32)
    grad = torch.randn(rows, hidden, device="cuda", dtype=dtype)  # contiguous, as a loss gives

    def once() -> None:
        h = torch._grouped_mm(x, w1, offs)
        a, b = h.chunk(2, dim=-1)
        out = torch._grouped_mm((torch.nn.functional.silu(a) * b).contiguous(), w2, offs)
        out.backward(grad)

    for _ in range(3):
        once()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(repeats):
        once()
    end.record()
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        once()
        torch.cuda.synchronize()
    names = sorted({e.name for e in prof.events() if "gemm" in e.name.lower()
                    or "cutlass" in e.name.lower() or "nvjet" in e.name.lower()})
    return start.elapsed_time(end) / repeats, names


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    records = []
    for name, rows, hidden, width, experts in CASES:
        for label, dtype, tf32 in (("fp32", torch.float32, False),
                                   ("fp32_tf32", torch.float32, True),
                                   ("bf16", torch.bfloat16, False)):
            torch.backends.cuda.matmul.allow_tf32 = tf32
            ms, kernels = _run(rows, hidden, width, experts, dtype)
            records.append({"case": name, "precision": label, "ms_fwd_bwd": round(ms, 3),
                            "kernels": kernels})
            print(json.dumps(records[-1]), flush=True)
    torch.backends.cuda.matmul.allow_tf32 = False
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "grouped_mm_precision.json").write_text(json.dumps(
        {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
         "records": records}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
