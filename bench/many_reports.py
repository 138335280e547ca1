"""Memory of reading many small reports in one process (issue 45: NVIDIA's reader keeps
about 24 MB of every report it opens; reports are read in a recycled worker process).

    python bench/many_reports.py [--reports 1000] [--report tests/data/hand_s128.ncu-rep.xz]
                                 [--in-process]

Each report is a copy of one recorded report under a new name, read with
``read_report(cache=False)``; every 50 reports it prints the reports read, this process's
peak resident memory, the largest peak of a worker so far (``RUSAGE_CHILDREN``), the
workers started and the seconds. ``--in-process`` reads in this process, as before.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from torch_nsight.report import read_report, read_worker  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reports", type=int, default=1000)
    parser.add_argument("--report", type=Path,
                        default=ROOT / "tests" / "data" / "hand_s128.ncu-rep.xz")
    parser.add_argument("--in-process", action="store_true")
    args = parser.parse_args(argv)
    if args.in_process:
        os.environ[read_worker.IN_PROCESS_ENV] = "1"
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="many_reports_") as folder:
        for i in range(1, args.reports + 1):
            copy = Path(folder) / f"r{i}{''.join(args.report.suffixes)}"
            shutil.copy(args.report, copy)
            read_report(copy, cache=False)
            copy.unlink()
            if i % 50 == 0 or i == args.reports:
                own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss >> 10
                worker = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss >> 10
                sys.stdout.write(f"{i:5d} reports  this process {own:5d} MB peak  worker "
                                 f"{worker:5d} MB peak  workers {read_worker.workers_started()}"
                                 f"  {time.perf_counter() - start:7.1f} s\n")
                sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
