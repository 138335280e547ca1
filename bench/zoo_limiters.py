"""What limits the latency-bound kernels of the zoo's fast profiles (CPU; reports from
``bench/zoo.py --phases profile --keep-reports`` on the GPU machine).

    PYTHONPATH=$PWD python bench/zoo_limiters.py REPORT_DIR [--out FILE]

For each ``<model>_profile.ncu-rep.xz``: the share of latency-bound kernels holding the
scheduler's figures (the fast set's one pass), the latency-bound GPU time by verdict
(``limiter``; ``none``: no cause named), and the top 10 hotspots' latency-bound rows with the
cause each names (``unnamed`` where the next step names none). Prints and writes JSON.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch_nsight
from bench.zoo import latency_top10
from torch_nsight.analyze.stalls import SCHEDULER_COLUMNS


def limiters(report: Path) -> dict[str, object]:
    kernels = torch_nsight.load(report, cache=False).kernels
    kernels = kernels[kernels["duration_ns"].notna()]
    latency = kernels[kernels["bound"] == "latency"]
    by_cause = latency.groupby(latency["limiter"].fillna("none"))["duration_ns"].sum()
    return {"latency_pct_of_gpu": round(100 * latency["duration_ns"].sum()
                                        / kernels["duration_ns"].sum(), 1),
            "with_scheduler_figures_pct": round(100 * float(
                latency[list(SCHEDULER_COLUMNS)].notna().all(axis=1).mean()), 1),
            "latency_time_by_cause_pct": {str(k): round(100 * v / by_cause.sum(), 1)
                                          for k, v in by_cause.items()},
            **latency_top10(kernels)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("reports", type=Path)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    result = {path.name.removesuffix("_profile.ncu-rep.xz"): limiters(path)
              for path in sorted(args.reports.glob("*_profile.ncu-rep.xz"))}
    text = json.dumps(result, indent=1)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
