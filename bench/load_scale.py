"""How long loading, attributing and classifying a 10,000-kernel report takes on this CPU.

    python bench/load_scale.py [REPORT.ncu-rep.xz ...] [--kernels 10000] [--workers N]

No 10,000-kernel report ships with the project, so this scales each real recorded fixture
(tests/data/, all three by default) to 10,000 kernels: kernel i of the scaled run is kernel
i mod n of the report, read through the real reader in the worker processes that ``load``
uses (``reader.read_in_workers``, forked from the process that opened the report). It then
builds the table and runs every analysis step on it. It prints, per report, one row per
stage: seconds, and microseconds per kernel. The cold row reads each of the report's own
kernels once, in this process.
"""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import pandas as pd  # noqa: E402

from torch_nsight import analyze  # noqa: E402
from torch_nsight.profile import Profile  # noqa: E402
from torch_nsight.report import cache, kernel_table, reader  # noqa: E402

logger = logging.getLogger("bench.load_scale")
DATA = ROOT / "tests" / "data"
DEFAULT_REPORTS = [ROOT / "torch_nsight" / "demo" / "llama_block_fwd_bwd.ncu-rep.xz",
                   DATA / "convnet_fwd.ncu-rep.xz", DATA / "llama_block_sweep.ncu-rep.xz"]


def read_scaled(context: Any, kernels: int, workers: int) -> list[dict[str, Any]]:
    """Read the scaled run as ``load`` reads a large report: chunks in forked workers."""
    positions = reader._positions(context)
    cycled = [positions[i % len(positions)] for i in range(kernels)]
    return reader.read_in_workers(context, cycled, workers)


def timed(rows: list[tuple[str, float, int]], stage: str, kernels: int,
          work: Callable[[], Any]) -> Any:
    start = time.perf_counter()
    result = work()
    rows.append((stage, time.perf_counter() - start, kernels))
    return result


def measure(report: Path, kernels: int, workers: int) -> pd.DataFrame:
    """Time every stage of loading ``report`` scaled to ``kernels`` kernels."""
    rows: list[tuple[str, float, int]] = []
    with reader.local_report(report) as local:
        context = timed(rows, "open report", 0, lambda: reader.open_context(local, report))
        n = len(reader._positions(context))
        timed(rows, f"cold read of its {n} kernels (1 process)", n,
              lambda: reader.read_records(context, local, workers=0))
        records = timed(rows, f"read {kernels} kernels ({workers} processes)", kernels,
                        lambda: read_scaled(context, kernels, workers))
    raw = timed(rows, "build table", kernels,
                lambda: kernel_table.records_to_frame(records, str(report)))
    # a scaled run is one long iteration: give each pass over the report its own run label
    raw["range_start_end"] = [tuple(s) + (f"sweep;variant=;shape=;run={i // n}",)
                             for i, s in enumerate(raw["range_start_end"])]
    analyzed = timed(rows, "attribute + roofline + classify", kernels,
                     lambda: analyze.analyze(raw))
    profile = Profile(analyzed, {})
    timed(rows, "modules()", kernels, profile.modules)
    timed(rows, "hotspots()", kernels, profile.hotspots)
    with tempfile.TemporaryDirectory() as scratch:
        fake = Path(scratch) / "scaled.ncu-rep"
        fake.write_bytes(b"")
        timed(rows, "write cache", kernels,
              lambda: cache.write_cache(fake, raw, {}, kernel_table.SCHEMA_VERSION))
        timed(rows, "read cache", kernels, lambda: cache.read_cache(fake, kernel_table.SCHEMA_VERSION))
    first_load = sum(s for stage, s, _ in rows if stage.startswith(
        ("open", "read ", "build", "attribute")) and "cache" not in stage)
    cached_load = sum(s for stage, s, _ in rows if stage in (
        "read cache", "attribute + roofline + classify"))
    rows.append(("= first load (open+read+build+analyze)", first_load, kernels))
    rows.append(("= cached load (read cache+analyze)", cached_load, kernels))
    summary = pd.DataFrame(rows, columns=["stage", "seconds", "kernels"])
    summary["us_per_kernel"] = (1e6 * summary["seconds"] / summary["kernels"]).where(
        summary["kernels"] > 0)
    return summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("reports", nargs="*", type=Path, default=DEFAULT_REPORTS)
    parser.add_argument("--kernels", type=int, default=10_000)
    parser.add_argument("--workers", type=int, default=reader._usable_cpus())
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    for report in args.reports:
        summary = measure(report, args.kernels, args.workers)
        sys.stdout.write(f"report: {report.name}, worker processes: {args.workers}\n")
        sys.stdout.write(summary.to_string(index=False, float_format=lambda v: f"{v:,.3f}")
                         + "\n\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
