"""The CPU test suite as CI runs it, timed from outside, with the peak memory of every
process it starts (issue 46: no test worker above 3 GB, the suite within 10 minutes on the
2-core CI machine).

Runs the README's test command (``python -m pytest -q -n auto``, or the arguments given
after ``--``) and samples the resident memory (``/proc/PID/status`` VmRSS) of the command's
process tree every half second: the xdist workers, NVIDIA's reader workers
(:mod:`torch_nsight.report.read_worker`), the scripts the CLI tests start. Linux only.

    python bench/suite_memory.py --json bench/suite_memory_DATE.json
    python bench/suite_memory.py -- python -m pytest -q -n 2 tests/analyze

Prints the wall time, the exit status and the largest peaks with each process's command
line (shortened); the JSON holds every sampled process's peak.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT = [sys.executable, "-m", "pytest", "-q", "-n", "auto"]
WORKER_LIMIT_MB = 3 * 1024


def _children() -> dict[int, list[int]]:
    """Every live process's children, by parent pid."""
    tree: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        parent = int(stat.rsplit(")", 1)[1].split()[1])
        tree.setdefault(parent, []).append(int(entry))
    return tree


def _descendants(root: int) -> list[int]:
    tree, seen, todo = _children(), [], [root]
    while todo:
        pid = todo.pop()
        seen.append(pid)
        todo.extend(tree.get(pid, []))
    return seen


def _rss_mb(pid: int) -> tuple[float, str] | None:
    """A process's resident memory (MB) and command line, or None once it is gone."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
        command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(
            errors="replace").strip()
    except OSError:
        return None
    for line in status.splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024.0, command
    return None


def run(command: list[str], interval: float = 0.5) -> dict[str, object]:
    """Run ``command`` in the repository root; its wall time, status and peaks."""
    peaks: dict[int, tuple[float, str]] = {}
    start = time.perf_counter()
    process = subprocess.Popen(command, cwd=ROOT)
    while process.poll() is None:
        for pid in _descendants(process.pid):
            sample = _rss_mb(pid)
            if sample is not None and sample[0] > peaks.get(pid, (0.0, ""))[0]:
                peaks[pid] = sample
        time.sleep(interval)
    wall = time.perf_counter() - start
    ranked = sorted(peaks.values(), reverse=True)
    return {"command": command, "returncode": process.returncode, "wall_s": round(wall, 1),
            "processes": len(peaks), "worker_limit_mb": WORKER_LIMIT_MB,
            "over_limit": sum(1 for mb, _ in ranked if mb > WORKER_LIMIT_MB),
            "peaks": [{"rss_mb": round(mb, 1), "command": cmd[:160]} for mb, cmd in ranked]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", type=Path, help="write the result here")
    parser.add_argument("command", nargs="*", help="after --: the command (default: the "
                        "README's test command)")
    args = parser.parse_args()
    result = run(args.command or DEFAULT)
    print(f"wall {result['wall_s']} s, exit {result['returncode']}, "
          f"{result['processes']} processes, {result['over_limit']} over "
          f"{WORKER_LIMIT_MB} MB")
    for peak in result["peaks"][:8]:  # type: ignore[index]
        print(f"  {peak['rss_mb']:8.1f} MB  {peak['command'][:100]}")
    if args.json:
        args.json.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
