"""Step-time cost of ``torch_nsight.instrument`` with no profiler attached (run on a GPU).

    PYTHONPATH=$PWD python bench/instrument_overhead.py [--json out.json] [--baseline HEAD]

A GPT-2-small-sized model (12 layers, d=768, 163 modules, bf16) runs a training step
(batch 8, seq 512, forward + cross-entropy + backward + SGD step) and a single-token decode
step (batch 1, seq 1, no grad). Four variants, interleaved round by round so drift in
clocks hits them alike; the median step time of each is reported with its cost against
plain:

* ``plain``: the model as is;
* ``instrument()``: the default, which installs hooks only when an NVTX consumer (ncu,
  nsys) is attached: here none is, so this should be plain;
* ``instrument(enabled=True)``: hooks forced on, NVTX ranges pushed with no consumer;
* ``emit_nvtx()``: ``torch.autograd.profiler.emit_nvtx``, PyTorch's own NVTX annotation;
* with ``--baseline REV``, also ``instrument(enabled=True) @REV``: the package as it was at
  that git revision, or as it is in a folder (a renamed copy, imported beside the working
  tree's), so a change is measured against its parent in the same run.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import io
import json
import re
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
import types
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch_nsight  # noqa: E402
from examples.models import GPT2Small  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
VARIANTS = ("plain", "instrument()", "instrument(enabled=True)", "emit_nvtx()")
BASELINE = "torch_nsight_baseline"


def load_baseline(source: str) -> types.ModuleType:
    """Import another copy of the package, renamed ``torch_nsight_baseline``, beside this one.

    Args:
        source: A git revision of this repository (``HEAD``, a commit), or a folder holding
            a ``torch_nsight`` package (a checkout, or a copy made where the revision is not
            in the local git history).

    The copy goes into a temporary folder and every ``torch_nsight`` name in it is renamed
    (its NVTX domain too, which no one reads here).
    """
    folder = Path(tempfile.mkdtemp(prefix="tn-baseline-"))
    given = Path(source)
    if (given / "torch_nsight" / "__init__.py").is_file():
        shutil.copytree(given / "torch_nsight", folder / "torch_nsight",
                        ignore=shutil.ignore_patterns("__pycache__"))
    else:
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", source, "torch_nsight"],
                                 check=True, capture_output=True).stdout
        with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
            tar.extractall(folder, filter="data")
    name = re.compile(r"\btorch_nsight\b")
    for path in (folder / "torch_nsight").rglob("*.py"):
        path.write_text(name.sub(BASELINE, path.read_text()))
    (folder / "torch_nsight").rename(folder / BASELINE)
    sys.path.insert(0, str(folder))
    return importlib.import_module(BASELINE)


def variant_context(name: str, model: torch.nn.Module,
                    baseline: types.ModuleType | None = None):
    if name == "plain":
        return contextlib.nullcontext()
    if name == "instrument()":
        return torch_nsight.instrument(model)
    if name == "instrument(enabled=True)":
        return torch_nsight.instrument(model, enabled=True)
    if name.startswith("instrument(enabled=True) @"):
        return baseline.instrument(model, enabled=True)  # type: ignore[union-attr]
    return torch.autograd.profiler.emit_nvtx()


def make_steps(model: torch.nn.Module, device: str):
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-4)
    train_ids = torch.randint(0, model.vocab, (8, 512), device=device)
    decode_ids = torch.randint(0, model.vocab, (1, 1), device=device)

    def train_step() -> None:
        logits = model(train_ids)
        loss = F.cross_entropy(logits.view(-1, logits.shape[-1]).float(), train_ids.view(-1))
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    def decode_step() -> None:
        with torch.no_grad():
            model(decode_ids)

    return {"train (bs 8, seq 512)": train_step, "decode (bs 1, 1 token)": decode_step}


def measure(step, model, rounds: int, steps: int, device: str, variants: tuple[str, ...],
            baseline: types.ModuleType | None = None) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {v: [] for v in variants}
    for _ in range(rounds):
        for variant in variants:
            with variant_context(variant, model, baseline):
                step()  # warm-up inside the variant
                for _ in range(steps):
                    if device == "cuda":
                        torch.cuda.synchronize()
                    start = time.perf_counter()
                    step()
                    if device == "cuda":
                        torch.cuda.synchronize()
                    times[variant].append(time.perf_counter() - start)
    return times


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--train-steps", type=int, default=10)
    parser.add_argument("--decode-steps", type=int, default=100)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--baseline", metavar="REV_OR_DIR",
                        help="also time instrument(enabled=True) of the package at this git "
                             "revision (e.g. HEAD) or in this folder, interleaved with the "
                             "rest")
    parser.add_argument("--baseline-label", help="its name in the table (default: REV_OR_DIR)")
    args = parser.parse_args()
    variants = VARIANTS
    baseline = None
    if args.baseline:
        baseline = load_baseline(args.baseline)
        variants = (*VARIANTS, f"instrument(enabled=True) @{args.baseline_label or args.baseline}")
    device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cpu":  # emit_nvtx() needs CUDA
        variants = tuple(v for v in variants if v != "emit_nvtx()")
    torch.manual_seed(0)
    model = GPT2Small().to(device=device, dtype=torch.bfloat16)
    modules = sum(1 for _ in model.named_modules())
    results = []
    for label, step in make_steps(model, device).items():
        model.train(label.startswith("train"))
        for _ in range(3):
            step()
        steps = args.train_steps if label.startswith("train") else args.decode_steps
        times = measure(step, model, args.rounds, steps, device, variants, baseline)
        plain = statistics.median(times["plain"])
        for variant in variants:
            median = statistics.median(times[variant])
            q = statistics.quantiles(times[variant], n=4)
            results.append({"step": label, "variant": variant, "median_ms": median * 1e3,
                            "iqr_ms": (q[2] - q[0]) * 1e3, "samples": len(times[variant]),
                            "vs_plain_pct": (median / plain - 1) * 100})
    gpu = torch.cuda.get_device_name() if device == "cuda" else "cpu"
    print(f"device: {gpu}; torch {torch.__version__}; modules: {modules}")
    print("| step | variant | median ms | IQR ms | vs plain |")
    print("|---|---|---:|---:|---:|")
    for r in results:
        print(f"| {r['step']} | {r['variant']} | {r['median_ms']:.3f} | {r['iqr_ms']:.3f} | "
              f"{r['vs_plain_pct']:+.1f}% |")
    if args.json:
        args.json.write_text(json.dumps({"device": gpu, "torch": torch.__version__,
                                         "modules": modules, "results": results}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
