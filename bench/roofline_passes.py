"""Where the roofline set's replay passes go, and whether ncu 2025.3.1 keeps several
``--kernel-id`` filters at once (GPU machine; issue 46, items 1 and 2).

    PYTHONPATH=/tmp/site:$PWD python bench/roofline_passes.py --out OUT

Part 1, passes. A small app holds 4 GiB on the GPU and launches, inside the profiled NVTX
range, 8 rounds of three elementwise kernels and one bf16 GEMM (32 kernels). Each metric
list below is one ncu command timed from outside; ncu's own "N passes" lines give the passes
of every kernel; (wall - start-up) / 32 is the cost of one kernel, the start-up being the mean
of part 2's two commands that profile one kernel each (the command with a filter that matches
nothing is run and kept too, but it runs first, cold). The lists: the ``fast`` and ``roofline`` sets;
the roofline set's metrics without the SpeedOfLight section; the section alone; the two SOL
percentages alone; the FLOP counters (all fifteen, the nine CUDA-core ones, the six tensor ones,
the CUDA-core ones without FP64, the three tensor precisions PyTorch trains in); the fast set
with every FLOP counter; the roofline set with ``--cache-control none``.

Part 2, filters. The same app's kernels under the duration list, with ``--kernel-id`` given
twice (the elementwise function's second invocation, the GEMM's first: every
elementwise kernel of PyTorch is one function), and given once with each: which
kernels ncu profiled (its "Profiling" lines), or its error.

Writes OUT/roofline_passes.json.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from ncu_kernel_cost import run  # bench/ is on the path of a bench script

from torch_nsight.metrics import METRIC_SETS, METRICS

ROUNDS = 8
KERNELS = ROUNDS * 4
APP = f"""
import torch, nvtx
big = [torch.empty(256 * 2**20, dtype=torch.uint8, device="cuda") for _ in range(16)]
x = torch.randn(4096, 4096, device="cuda")
a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
torch.cuda.synchronize()
with nvtx.annotate("tn_measure", domain="torch_nsight"):
    for _ in range({ROUNDS}):
        x = torch.relu(x * 1.0001 + 0.5)  # 3 kernels: mul, add, relu
        a = a @ a  # 1 bf16 GEMM
torch.cuda.synchronize()
"""


def _names(kind: str, *, words: tuple[str, ...] = ()) -> list[str]:
    return [m.name for m in METRICS
            if m.kind == kind and (not words or any(w in m.name for w in words))]


def lists() -> dict[str, tuple[list[str], list[str]]]:
    """Name -> (metrics, extra ncu arguments)."""
    duration = list(METRIC_SETS["duration"].metrics)
    roofline = list(METRIC_SETS["roofline"].metrics)
    sass = [m for m in _names("counter") if "_sass_" in m]
    tensor = [m for m in _names("counter") if "ops_path_tensor" in m]
    pct = _names("percent")
    section = ["--section", "SpeedOfLight"]
    return {
        "fast": (list(METRIC_SETS["fast"].metrics), []),
        "roofline": (roofline, section),
        "roofline_without_section": (roofline, []),
        "section_only": (duration, section),
        "sol_percentages": (duration + pct, []),
        "flops_all": (duration + sass + tensor, []),
        "flops_cuda_cores": (duration + sass, []),
        "flops_tensor": (duration + tensor, []),
        "flops_cuda_cores_no_fp64": (duration + [m for m in sass if "_op_d" not in m], []),
        "flops_tensor_bf16_fp16_tf32": (
            duration + [m for m in tensor if any(p in m for p in ("bf16", "fp16", "tf32"))], []),
        "fast_with_flops": (list(METRIC_SETS["fast"].metrics) + sass + tensor, []),
        "roofline_cache_none": (roofline, [*section, "--cache-control", "none"]),
    }


def ncu(app: Path, report: Path, metrics: list[str], extra: list[str], include: str
        ) -> dict[str, object]:
    """:func:`ncu_kernel_cost.run` (every kernel's passes as ``passes``)."""
    record = run(app, report, metrics, extra, include, timeout=400)
    record["passes"] = record.pop("passes_each")
    return record


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--only", default="", help="comma-separated list names (part 1)")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    result: dict[str, object] = {"kernels": KERNELS}
    with tempfile.TemporaryDirectory() as folder:
        app, report = Path(folder) / "app.py", Path(folder) / "r"
        app.write_text(APP)
        duration = list(METRIC_SETS["duration"].metrics)
        result["start_up"] = ncu(app, report, duration, [], "nothing_matches")
        chosen = [n for n in args.only.split(",") if n]
        for name, (metrics, extra) in lists().items():
            if chosen and name not in chosen:
                continue
            record = ncu(app, report, metrics, extra, "tn_measure")
            record.pop("profiled")
            result[name] = record
            print(name, record, flush=True)
        elementwise, gemm = "::regex:elementwise:2", "::regex:^[^v]:1"
        for name, ids in {"kernel_id_elementwise_2": [elementwise],
                          "kernel_id_gemm_1": [gemm],
                          "kernel_id_twice": [elementwise, gemm]}.items():
            extra = [arg for value in ids for arg in ("--kernel-id", value)]
            result[name] = ncu(app, report, duration, extra, "tn_measure")
            print(name, result[name], flush=True)
    (args.out / "roofline_passes.json").write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
