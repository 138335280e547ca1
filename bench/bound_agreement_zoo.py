"""The fast tier's bound against Nsight Compute's SOL verdict on zoo models, each training
step profiled with ``--metric-set roofline`` (GPU machine; issue 43's target on the
verification models).

    PYTHONPATH=/tmp/site:$PWD python bench/bound_agreement_zoo.py --out OUT --models sage,wav2vec2

For each model: ``torch-nsight profile --steps 12:13 --metric-set roofline -- python
bench/zoo_app.py MODEL --steps 14``, timed from outside, then
:func:`bound_agreement_full.agreement` on its report (the share of kernels and of GPU time
where the fast tier's estimate, SOL columns dropped, names the bound ncu's rule names).
``--replicate-launches M1,M2`` gives those models the option (a recurrent step); ``--fast``
also times the same command with the fast default first (issue 46's roofline ÷ fast), its
``time:`` lines kept. Writes ``OUT/bound_agreement_zoo.json``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from bound_agreement_full import agreement  # bench/ is on the path of a bench script

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--models", default="sage,wav2vec2")
    parser.add_argument("--timeout", type=float, default=260.0)
    parser.add_argument("--replicate-launches", default="", metavar="MODELS")
    parser.add_argument("--fast", action="store_true")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    records = []
    for model in args.models.split(","):
        work = Path("/tmp/bound_agreement_zoo") / model
        option = ["--replicate-launches"] if model in args.replicate_launches.split(",") else []
        record: dict[str, object] = {"model": model, "options": option}
        if args.fast:
            rc, wall, tail = _profile(model, work.with_name(model + "_fast"), option,
                                      args.timeout)
            record["fast"] = {"rc": rc, "wall_s": wall, "tail": tail}
        rc, wall, tail = _profile(model, work, [*option, "--metric-set", "roofline"],
                                  args.timeout)
        record.update(rc=rc, wall_s=wall, tail=tail)
        if rc == 0:
            record["agreement"] = agreement(work / "report.ncu-rep")
        records.append(record)
        print(json.dumps(record, indent=1), flush=True)
        (args.out / "bound_agreement_zoo.json").write_text(json.dumps(records, indent=1))
    return 0


def _profile(model: str, work: Path, options: list[str], timeout: float
             ) -> tuple[int | str, float, str]:
    """``profile --steps 12:13`` of one zoo model, timed from outside: (exit status or
    ``timeout``, seconds, its last lines)."""
    started = time.time()
    try:
        done = subprocess.run(
            [sys.executable, "-m", "torch_nsight", "profile", "--steps", "12:13", *options,
             "--out", str(work), "--force", "--",
             sys.executable, str(ROOT / "bench" / "zoo_app.py"), model, "--steps", "14"],
            capture_output=True, text=True, cwd=ROOT, timeout=timeout)
        rc: int | str = done.returncode
        tail = "\n".join((done.stdout + done.stderr).splitlines()[-3:])
    except subprocess.TimeoutExpired:
        rc, tail = "timeout", ""
    return rc, round(time.time() - started, 1), tail


if __name__ == "__main__":
    raise SystemExit(main())
