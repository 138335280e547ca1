"""The full fuzz run over every input kind (issue 45): 5,000 damaged copies of recorded files
and more, each read by :func:`torch_nsight.load` and printed as ``torch-nsight report``
prints it (tests/report/fuzz_inputs.py makes and checks the cases; the test suite runs a
seeded subset of them).

    python bench/fuzz_inputs.py [--kinds saved cache ...] [--scale 1.0] [--seed N]
                                [--memory-gb 4] [--json OUT.json]

A case passes when it loads or is refused with :class:`~torch_nsight.TorchNsightError`, and
nothing it printed, logged or wrote to standard error holds a raw control character or a
csv cell a spreadsheet would run. The process runs under an address-space limit
(``--memory-gb``, inherited by the report reader's worker). It prints, per kind, the cases
loaded, refused and failed, and the first failures with their traceback; ``--json`` writes
the same as JSON. The exit status is 1 when any case failed.
"""

from __future__ import annotations

import argparse
import json
import platform
import resource
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.report.fuzz_inputs import MAKERS, SEED, Seeds, run_case  # noqa: E402

#: Cases per kind of input at ``--scale 1``: 5,600 in all.
CASES = {"saved": 1200, "cache": 600, "manifest": 1000, "calls": 800, "trace": 1200,
         "report": 400, "launches": 400}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kinds", nargs="+", choices=tuple(MAKERS), default=list(CASES))
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=SEED)
    parser.add_argument("--memory-gb", type=float, default=4.0)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    limit = int(args.memory_gb * (1 << 30))
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                            capture_output=True, text=True).stdout.strip()
    result: dict = {"seed": args.seed, "commit": commit, "machine": platform.platform(),
                    "memory_gb": args.memory_gb, "kinds": {}}
    with tempfile.TemporaryDirectory(prefix="fuzz_inputs_") as work:
        seeds = Seeds(Path(work))
        for kind in args.kinds:
            start, endings, failures = time.perf_counter(), Counter(), []
            for index in range(round(CASES[kind] * args.scale)):
                outcome = run_case(seeds, kind, index, args.seed)
                endings[outcome.ending] += 1
                if outcome.problems:
                    failures.append({"case": outcome.case, "ending": outcome.ending,
                                     "problems": outcome.problems})
            seconds = time.perf_counter() - start
            result["kinds"][kind] = {"cases": sum(endings.values()), **endings,
                                     "failed_cases": len(failures), "seconds": round(seconds, 1),
                                     "failures": failures[:20]}
            sys.stdout.write(f"{kind:9s} {sum(endings.values()):5d} cases  "
                             f"loaded {endings['loaded']:5d}  refused {endings['refused']:5d}  "
                             f"failed {len(failures):4d}  {seconds:7.1f} s\n")
            for failure in failures[:5]:
                sys.stdout.write(f"  {failure['case']}: {failure['problems'][0]}\n")
            sys.stdout.flush()
    result["peak_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss >> 10
    result["worker_peak_mb"] = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss >> 10
    if args.json is not None:
        args.json.write_text(json.dumps(result, indent=1) + "\n")
    failed = sum(k["failed_cases"] for k in result["kinds"].values())
    sys.stdout.write(f"{sum(k['cases'] for k in result['kinds'].values())} cases, {failed} "
                     f"failed; peak {result['peak_mb']} MB here, {result['worker_peak_mb']} MB "
                     "in a report worker\n")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
