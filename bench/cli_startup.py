"""Start-up of the command line, whole processes timed from outside, as a user sees it.

    python bench/cli_startup.py [--before REV] [--repeats 5]

Times ``python -m torch_nsight report --help`` and ``python -m torch_nsight report FIXTURE``
(its cache already written) for this checkout and, with ``--before``, for revision REV
checked out into a temporary worktree; prints a Markdown table of medians.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "tests" / "data" / "llama_block_sweep.ncu-rep.xz"


def timed(tree: Path, args: list[str], repeats: int, cwd: Path) -> float:
    env = dict(os.environ, PYTHONPATH=str(tree))
    command = [sys.executable, "-m", "torch_nsight", *args]
    subprocess.run(command, env=env, cwd=cwd, capture_output=True, check=True)  # warm-up
    seconds = []
    for _ in range(repeats):
        started = time.perf_counter()
        subprocess.run(command, env=env, cwd=cwd, capture_output=True, check=True)
        seconds.append(time.perf_counter() - started)
    return statistics.median(seconds)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", default=None, help="a git revision to compare with")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="tn-startup-"))
    report = shutil.copy(FIXTURE, work / FIXTURE.name)
    trees = {"this checkout": ROOT}
    if args.before:
        old = work / "before"
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(old),
                        args.before], check=True, capture_output=True)
        trees = {f"before ({args.before})": old, **trees}
    print("| tree | `report --help` | `report <fixture>` |\n|---|---|---|")
    try:
        for name, tree in trees.items():
            help_s = timed(tree, ["report", "--help"], args.repeats, work)
            report_s = timed(tree, ["report", str(report)], args.repeats, work)
            print(f"| {name} | {help_s:.2f} s | {report_s:.2f} s |")
    finally:
        if args.before:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force",
                            str(work / "before")], capture_output=True)
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
