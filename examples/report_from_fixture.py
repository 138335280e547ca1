"""Render the recorded Llama-block report: hotspot and module tables, roofline and scaling.

    python examples/report_from_fixture.py                # writes into ./report_out
    python examples/report_from_fixture.py --out /tmp/llama

Runs anywhere (no GPU): it reads the demo's report, recorded on an H200 and shipped in the
package (``torch_nsight/demo/llama_block_fwd_bwd.ncu-rep.xz``), from a temporary copy so
that no cache file lands in the package.
"""

from __future__ import annotations

import argparse
import logging
import tempfile
from pathlib import Path

import torch_nsight
from torch_nsight.demo import recorded_report
from torch_nsight.render import plot_roofline, plot_scaling, render_table


def main(argv: list[str] | None = None) -> int:
    """Print the tables and write ``roofline.png`` and ``scaling.png`` into ``--out``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("report_out"),
                        help="folder for roofline.png and scaling.png (created)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")

    report = recorded_report()
    with tempfile.TemporaryDirectory() as folder:
        copy = Path(folder) / report.name
        copy.write_bytes(report.read_bytes())
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
