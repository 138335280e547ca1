"""Render the recorded Llama-block report: hotspot and module tables, roofline and scaling.

    python examples/report_from_fixture.py                # writes into ./report_out
    python examples/report_from_fixture.py --out /tmp/llama

Runs anywhere (no GPU): it reads ``tests/data/llama_block_fwd_bwd.ncu-rep.xz``, recorded on
an H200, from a temporary copy so that no cache file lands in ``tests/data``.
"""

from __future__ import annotations

import argparse
import logging
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch_nsight  # noqa: E402
from torch_nsight.render import plot_roofline, plot_scaling, render_table  # noqa: E402

FIXTURE = (Path(__file__).resolve().parent.parent / "tests" / "data"
           / "llama_block_fwd_bwd.ncu-rep.xz")


def main(argv: list[str] | None = None) -> int:
    """Print the tables and write ``roofline.png`` and ``scaling.png`` into ``--out``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("report_out"),
                        help="folder for roofline.png and scaling.png (created)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    if not FIXTURE.is_file():
        print(f"{FIXTURE} is missing: run from a source checkout", file=sys.stderr)
        return 1

    with tempfile.TemporaryDirectory() as folder:
        copy = Path(folder) / FIXTURE.name
        shutil.copy(FIXTURE, copy)
        profile = torch_nsight.load(copy)

    print("Hotspots (by recoverable time):")
    print(render_table(profile, "hotspots", n=10))
    print("\nModule tree (down to depth 2):")
    print(render_table(profile, "modules", depth=2))

    args.out.mkdir(parents=True, exist_ok=True)
    plot_roofline(profile, args.out / "roofline.png")
    plot_scaling(profile, args.out / "scaling.png")
    print(f"\nwrote {args.out / 'roofline.png'} and {args.out / 'scaling.png'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
