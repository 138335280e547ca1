"""``sweep(model)`` of a live model against the bare script, this tree against a baseline
tree, on a GPU with ncu: whole processes timed from outside, the runs alternating, medians
of ``--repeats`` after one warm-up round.

    PYTHONPATH=$PWD python bench/sweep_live.py --baseline-tree DIR [--repeats 2] [--out DIR]

The case is bench/real_model.py (Hugging Face GPT-2 small forward, batch 4, seq 1024, bf16,
random weights, the fast set): ``bare`` is the user's script without a profiler; ``sweep``
builds the model in the script and hands the object to ``sweep()``, with this tree, with
this tree and ``TORCH_NSIGHT_EARLY_CUDA=0`` (the child starts CUDA after its imports, as
before), and with the baseline tree (``--baseline-tree``: a folder holding the
``torch_nsight`` package of another commit). Each sweep's own phase stamps (where the time
went, :mod:`torch_nsight.collect.shared.timing`) and the script's stamps are kept per run.
Writes ``DIR/sweep_live.json`` and a Markdown table on standard output.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _run(command: list[str], log: Path, env: dict[str, str]) -> float:
    started = time.perf_counter()
    with open(log, "w") as out:
        done = subprocess.run(command, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT,
                              env={**os.environ, **env}, check=False)
    took = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"{command} exited {done.returncode}; see {log}")
    return took


def _cases(out: Path, baseline: Path | None) -> dict[str, tuple[list[str], dict[str, str]]]:
    python, real = sys.executable, "bench/real_model.py"
    here = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))

    def sweep(name: str, tree: str, **env: str) -> tuple[list[str], dict[str, str]]:
        return ([python, real, "sweep", "--metric-set", "fast", "--out", str(out / name)],
                {"PYTHONPATH": tree, **env})

    cases = {"bare": ([python, real, "bare"], {"PYTHONPATH": here}),
             "sweep(model)": sweep("this", here),
             "sweep(model), no early CUDA": sweep("late", here, TORCH_NSIGHT_EARLY_CUDA="0")}
    if baseline is not None:
        tree = os.pathsep.join(filter(None, [str(baseline.resolve()), here]))
        cases["sweep(model), baseline tree"] = sweep("baseline", tree)
    return cases


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--out", type=Path, default=Path("bench_out/sweep_live"))
    parser.add_argument("--baseline-tree", type=Path, default=None)
    args = parser.parse_args()
    out = args.out.resolve()
    (out / "logs").mkdir(parents=True, exist_ok=True)
    cases = _cases(out, args.baseline_tree)
    seconds: dict[str, list[float]] = {name: [] for name in cases}
    phases: dict[str, list[dict]] = {name: [] for name in cases}
    for round_ in range(args.repeats + 1):
        for name, (command, env) in cases.items():
            log = out / "logs" / f"{name.replace(' ', '_').replace(',', '')}-{round_}.log"
            took = _run(command, log, env)
            summary = next((out / d / "summary.json" for d in ("this", "late", "baseline")
                            if command[-1] == str(out / d)), None)
            if round_ > 0:
                seconds[name].append(took)
                if summary is not None and summary.is_file():
                    record = json.loads(summary.read_text())
                    result = summary.parent / "sweep.result.json"
                    if result.is_file():  # how the child's early CUDA start went
                        record["early_cuda"] = json.loads(result.read_text()).get("early_cuda")
                    phases[name].append(record)
            print(f"{name} round {round_}: {took:.1f} s", file=sys.stderr, flush=True)
    medians = {name: statistics.median(v) for name, v in seconds.items()}
    (out / "sweep_live.json").write_text(json.dumps(
        {"seconds": seconds, "medians": medians, "summaries": phases}, indent=1, default=str))
    bare = medians["bare"]
    print("\n| run | median (runs) | x bare |\n|---|---:|---:|")
    for name, median in medians.items():
        runs = " / ".join(f"{s:.1f}" for s in seconds[name])
        print(f"| {name} | {median:.1f} s ({runs}) | {median / bare:.2f}x |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
