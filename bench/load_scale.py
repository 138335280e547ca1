"""How long loading, attributing and classifying a 10,000-kernel report takes on this CPU.

    python bench/load_scale.py [REPORT.ncu-rep.xz] [--kernels 10000] [--workers N]

No 10,000-kernel report ships with the project, so this reads the kernels of a real
recorded fixture over and over (kernel i of the scaled run is kernel i mod n of the report)
through the real reader, in the worker processes that ``load`` uses. It then builds the
table and runs every analysis step on it. It prints one row per stage: seconds, and
microseconds per kernel. The cold row reads each of the report's own kernels once, on a
freshly opened report, which is the cost a first load pays per kernel.
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
from torch_nsight.report import cache, reader, table  # noqa: E402

logger = logging.getLogger("bench.load_scale")
DEFAULT_REPORT = ROOT / "tests" / "data" / "llama_block_fwd_bwd.ncu-rep.xz"


def read_cycled(local: str, start: int, stop: int) -> list[dict[str, Any]]:
    """Read kernels ``start:stop`` of the scaled run: kernel i is report kernel i mod n."""
    context = reader.open_context(Path(local), local)
    positions = reader._positions(context)
    out = []
    for i in range(start, stop):
        r, a = positions[i % len(positions)]
        out.append(reader.read_action(context.range_by_idx(r).action_by_idx(a), r, a))
    return out


def read_scaled(local: Path, kernels: int, workers: int) -> list[dict[str, Any]]:
    """Read the scaled run as ``load`` reads a large report: chunks in fresh processes."""
    chunks = [(str(local), start, min(start + reader.CHUNK_KERNELS, kernels))
              for start in range(0, kernels, reader.CHUNK_KERNELS)]
    with reader._fork_context().Pool(workers, maxtasksperchild=1) as pool:
        parts = pool.starmap(read_cycled, chunks, chunksize=1)
    return [record for part in parts for record in part]


def timed(rows: list[tuple[str, float, int]], stage: str, kernels: int,
          work: Callable[[], Any]) -> Any:
    start = time.perf_counter()
    result = work()
    rows.append((stage, time.perf_counter() - start, kernels))
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("report", nargs="?", type=Path, default=DEFAULT_REPORT)
    parser.add_argument("--kernels", type=int, default=10_000)
    parser.add_argument("--workers", type=int, default=reader._usable_cpus())
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    rows: list[tuple[str, float, int]] = []
    with reader.local_report(args.report) as local:
        context = timed(rows, "open report", 0, lambda: reader.open_context(local, args.report))
        n = len(reader._positions(context))
        timed(rows, f"cold read of its {n} kernels (1 process)", n,
              lambda: reader.read_records(context, local, workers=0))
        records = timed(rows, f"read {args.kernels} kernels ({args.workers} processes)",
                        args.kernels, lambda: read_scaled(local, args.kernels, args.workers))
    raw = timed(rows, "build table", args.kernels,
                lambda: table.records_to_frame(records, str(args.report)))
    # a scaled run is one long iteration: give each pass over the report its own run label
    raw["nvtx_start_end"] = [tuple(s) + (f"sweep;variant=;shape=;run={i // n}",)
                             for i, s in enumerate(raw["nvtx_start_end"])]
    kernels = timed(rows, "attribute + roofline + classify", args.kernels,
                    lambda: analyze.analyze(raw))
    profile = Profile(kernels, {})
    timed(rows, "modules()", args.kernels, profile.modules)
    timed(rows, "hotspots()", args.kernels, profile.hotspots)
    with tempfile.TemporaryDirectory() as scratch:
        fake = Path(scratch) / "scaled.ncu-rep"
        fake.write_bytes(b"")
        timed(rows, "write cache", args.kernels,
              lambda: cache.write_cache(fake, raw, {}, table.SCHEMA_VERSION))
        timed(rows, "read cache", args.kernels,
              lambda: cache.read_cache(fake, table.SCHEMA_VERSION))
    first_load = sum(s for stage, s, _ in rows if stage.startswith(
        ("open", "read ", "build", "attribute")) and "cache" not in stage)
    cached_load = sum(s for stage, s, _ in rows if stage in (
        "read cache", "attribute + roofline + classify"))
    rows.append(("= first load (open+read+build+analyze)", first_load, args.kernels))
    rows.append(("= cached load (read cache+analyze)", cached_load, args.kernels))
    summary = pd.DataFrame(rows, columns=["stage", "seconds", "kernels"])
    summary["us_per_kernel"] = (1e6 * summary["seconds"] / summary["kernels"]).where(
        summary["kernels"] > 0)
    sys.stdout.write(f"report: {args.report} ({n} kernels), CPUs used: {args.workers}\n")
    sys.stdout.write(summary.to_string(index=False, float_format=lambda v: f"{v:,.3f}") + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
