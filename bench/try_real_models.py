"""Try the sweep as a new user would, on real models from public libraries (GPU machine).

    PYTHONPATH=$PWD python bench/try_real_models.py --out OUT

* Hugging Face GPT-2 (random weights, 2 layers, n_embd 768), bf16 forward and backward at
  two shapes, from a process with TF32 on: the profile must say TF32, every kernel must be
  attributed, the calls table must hold each Conv1D projection's GEMM at its shape.
* torchvision ResNet-18 in fp32 with a factory that turns cudnn.benchmark on (once not
  picklable): the child must run with it, and the profile must say so.

Writes ``summary.json`` and the sweep directories under OUT, and prints what it found.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

import torch_nsight


def gpt2() -> torch.nn.Module:
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(n_layer=2, n_embd=768, n_head=12, vocab_size=50304)
    return GPT2LMHeadModel(config)


def gpt2_inputs(shape: tuple[int, int]) -> dict:
    batch, seq = shape
    return {"input_ids": torch.randint(0, 50304, (batch, seq))}


def resnet() -> torch.nn.Module:
    import torchvision

    torch.backends.cudnn.benchmark = True
    return torchvision.models.resnet18(weights=None)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    summary = {}
    torch.backends.cuda.matmul.allow_tf32 = True
    started = time.perf_counter()
    profile = torch_nsight.sweep(gpt2, [(4, 256), (4, 1024)], make_inputs=gpt2_inputs,
                                 dtype="bf16", backward=True, output_dir=args.out / "gpt2",
                                 quiet=True)
    calls = profile.calls
    attn = calls[(calls["module"].astype(str).str.endswith("attn.c_attn"))
                 & (calls["direction"] == "fwd") & calls["aten_op"].isin(["addmm", "mm"])]
    summary["gpt2"] = {
        "seconds": round(time.perf_counter() - started, 1), "rows": len(profile.kernels),
        "replicated_rows": profile.replicated_rows, "coverage": profile.coverage,
        "describe": profile.describe(), "failures": profile.failures,
        "c_attn_gemms": attn[["shape", "module", "input_shapes", "flops"]].astype(str)
        .to_dict("records")}
    torch.backends.cuda.matmul.allow_tf32 = False
    started = time.perf_counter()
    profile = torch_nsight.sweep(resnet, [(8, 3, 224, 224)], output_dir=args.out / "resnet",
                                 quiet=True)
    summary["resnet"] = {"seconds": round(time.perf_counter() - started, 1),
                         "rows": len(profile.kernels), "coverage": profile.coverage,
                         "describe": profile.describe(),
                         "benchmark": profile.meta.settings.get("cudnn.benchmark"),
                         "failures": profile.failures}
    (args.out / "summary.json").write_text(json.dumps(summary, indent=1, default=str))
    print(json.dumps(summary, indent=1, default=str)[:5000])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
