"""A real model from a public library, as a new user would profile it: Hugging Face GPT-2
small (12 layers, random weights, no download), forward, batch 4, seq 1024, bf16.

    python bench/real_model.py bare                    # the user's script, no profiler
    python bench/real_model.py hand                    # instrumented, one measured range
    python bench/real_model.py sweep --metric-set fast --out DIR

``bare`` is what the user runs without any profiler (build the model on the CPU as
``transformers`` does, move it to the GPU, one forward). ``hand`` is the same with
``torch_nsight.instrument`` and one measured iteration inside the ``torch_nsight@measure``
range, for a plain ``ncu --nvtx --nvtx-include torch_nsight@measure`` run (the anchor, which
measures every layer directly). ``sweep`` hands the model to ``torch_nsight.sweep`` and writes
the kernel table and the stamps of the user's process (start, imports, build, sweep) to DIR.
bench/sweep_vs_anchors.py times each as a whole process.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.append(str(Path(__file__).resolve().parent.parent))

try:  # a baseline tree (bench/sweep_vs_anchors.py --baseline) may predate the stamps
    from torch_nsight.collect.shared.timing import process_start_time
except ImportError:
    def process_start_time() -> float | None:
        return None

STAMPS: dict[str, float | None] = {"process_start": process_start_time()}

import torch  # noqa: E402
from transformers import GPT2Config, GPT2LMHeadModel  # noqa: E402

STAMPS["imported"] = time.time()
SHAPE = (4, 1024)


def build() -> torch.nn.Module:
    """GPT-2 small with random weights (transformers' own initialisation)."""
    return GPT2LMHeadModel(GPT2Config()).eval()


def make_inputs(shape: tuple[int, int]) -> dict:
    """Token ids for the model (the sweep moves them to the GPU)."""
    return {"input_ids": torch.randint(0, 50257, tuple(shape))}


def bare() -> None:
    model = build().to("cuda", torch.bfloat16)
    with torch.no_grad():
        model(**{k: v.cuda() for k, v in make_inputs(SHAPE).items()})
    torch.cuda.synchronize()


def hand(warmup: int = 2) -> None:
    import nvtx

    import torch_nsight
    from torch_nsight.naming import DOMAIN, MEASURE_MESSAGE, format_measure_range

    model = build().to("cuda", torch.bfloat16)
    inputs = {k: v.cuda() for k, v in make_inputs(SHAPE).items()}
    label = "x".join(map(str, SHAPE))
    with torch_nsight.instrument(model, enabled=True), torch.no_grad():
        for step in range(warmup + 1):
            if step == warmup:
                torch.cuda.synchronize()
                ranges = [nvtx.start_range(MEASURE_MESSAGE, domain=DOMAIN),
                          nvtx.start_range(format_measure_range(shape=label), domain=DOMAIN)]
            model(**inputs)
        torch.cuda.synchronize()
        for handle in reversed(ranges):
            nvtx.end_range(handle)


def sweep(out: Path, metric_set: str | None, replicate: bool = True) -> None:
    import torch_nsight

    model = build()
    STAMPS["built"] = time.time()
    profile = torch_nsight.sweep(model, [SHAPE], make_inputs=make_inputs, dtype="bf16",
                                 output_dir=out, metric_set=metric_set, quiet=True,
                                 replicate=replicate)
    STAMPS["swept"] = time.time()
    k = profile.kernels
    k.to_parquet(out / "ours_kernels.parquet")
    summary = {"kernels": len(k), "profiled": int(k["replicated_from"].isna().sum())
               if "replicated_from" in k else len(k),
               "with_duration": int(k["duration_ns"].notna().sum()),
               "with_flops": int(k["flops"].notna().sum()),
               "with_bound": int(k["bound"].notna().sum()),
               "with_roof": int(k["pct_of_roof"].notna().sum()),
               "flops_basis": k["flops_basis"].value_counts().to_dict()
               if "flops_basis" in k else {},
               "unattributed": int((k["module"] == "(unattributed)").sum()),
               "coverage": profile.coverage, "failures": profile.failures,
               "timing": getattr(profile.meta.sweeps[0], "timing", None), "stamps": STAMPS,
               "status_events": status_events(out)}
    (out / "summary.json").write_text(json.dumps(summary, default=str))


def status_events(out: Path) -> list[dict]:
    """The child's status events (start, item_start/item_end, done) with their times: the
    coarse breakdown of a tree without phase stamps."""
    path = out / "sweep.status.jsonl"
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", choices=["bare", "hand", "sweep"])
    parser.add_argument("--metric-set", default=None)
    parser.add_argument("--no-replicate", action="store_true",
                        help="profile every layer (the direct reference for replication)")
    parser.add_argument("--out", type=Path, default=Path("bench_out/real_model"))
    args = parser.parse_args()
    if args.mode == "bare":
        bare()
    elif args.mode == "hand":
        hand()
    else:
        args.out.mkdir(parents=True, exist_ok=True)
        sweep(args.out.resolve(), args.metric_set, not args.no_replicate)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
