"""``torch-nsight sweep FILE:factory`` as a user runs it, whole processes timed from outside:
this checkout against another tree of the package, and the bare script as the anchor.

    python bench/sweep_cli_startup.py [--before-tree DIR] [--repeats 3] [--dry-run]
        [--out results.json]

The model is torchvision's ResNet-18 (random weights) in a file of its own, swept at one
shape with the defaults (under ncu, or ``--dry-run`` without it); the bare script builds the
same model and runs the same forward once on the GPU. The runs alternate between the trees,
so a drifting machine shifts both alike. Prints a Markdown table of medians.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHAPE = "8x3x224x224"

MODEL = """
import torch
import torchvision


def make():
    return torchvision.models.resnet18(weights=None)
"""

BARE = """
import torch
import model

net = model.make().cuda().eval()
with torch.no_grad():
    net(torch.randn(8, 3, 224, 224, device="cuda"))
torch.cuda.synchronize()
"""


def timed(command: list[str], cwd: Path, tree: Path | None) -> float:
    env = dict(os.environ)
    if tree is not None:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(tree),
                                                          env.get("PYTHONPATH", "")]))
    started = time.perf_counter()
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True,
                          check=False)
    took = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"{command} exited {done.returncode}:\n{done.stderr[-2000:]}")
    return took


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before-tree", type=Path, default=None,
                        help="a folder holding another version of the torch_nsight package")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--dry-run", action="store_true", help="sweep without ncu")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="tn-sweep-cli-"))
    (work / "model.py").write_text(MODEL)
    (work / "bare.py").write_text(BARE)
    sweep = [sys.executable, "-m", "torch_nsight", "sweep", "model.py:make", "--shapes", SHAPE,
             "--force", "-o", "out", *(["--dry-run"] if args.dry_run else [])]
    runs: dict[str, tuple[list[str], Path | None]] = {
        "bare script": ([sys.executable, "bare.py"], None),
        "sweep, this checkout": (sweep, ROOT)}
    if args.before_tree is not None:
        runs["sweep, before"] = (sweep, args.before_tree.resolve())
    seconds: dict[str, list[float]] = {name: [] for name in runs}
    try:
        for command, tree in runs.values():  # warm-up: caches, ncu's first start
            timed(command, work, tree)
        for _ in range(args.repeats):
            for name, (command, tree) in runs.items():
                seconds[name].append(timed(command, work, tree))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    medians = {name: statistics.median(values) for name, values in seconds.items()}
    bare = medians["bare script"]
    print(f"| run ({'dry run' if args.dry_run else 'under ncu'}, {SHAPE}) | median | "
          "× bare |\n|---|---|---|")
    for name, median in medians.items():
        print(f"| {name} | {median:.2f} s | {median / bare:.2f}× |")
    if args.out is not None:
        args.out.write_text(json.dumps({"shape": SHAPE, "dry_run": args.dry_run,
                                        "seconds": seconds, "medians": medians}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
