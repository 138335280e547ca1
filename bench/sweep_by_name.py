"""``sweep()`` given the model by name against ``sweep()`` given the model itself, the bare
script and nsight-python, on a GPU with ncu: whole processes timed from outside, the runs
alternating, medians of ``--repeats`` after one warm-up round.

    PYTHONPATH=$PWD python bench/sweep_by_name.py [--repeats 2] [--out DIR] [--only CASE]

gpt2: Hugging Face GPT-2 small forward, batch 4, seq 1024, bf16, random weights
    (``bench/real_model.py``, the fast set, identical layers replicated):
    - ``bare``: the user's script without a profiler (imports, build on the CPU, one forward);
    - ``sweep(model)``: the script imports torch and ``transformers``, builds the model and
      hands it to ``sweep()``;
    - ``sweep(name)``: a script that imports only torch_nsight and calls
      ``sweep("bench/real_model.py:build", ...)``: the profiled child alone imports the model;
    - ``command``: ``torch-nsight sweep bench/real_model.py:build`` with the same options.
llama: nsight-python's own case, the Llama-style block at seq 256/1024/4096, bf16, forward:
    - ``nsight-python``: 0.9.6 timing the five projection GEMMs, 3 runs
      (``bench/anchor_nsight_python.py``);
    - ``sweep(model)``: ``bench/sweep_vs_anchors.py``'s fast-set sweep of the class;
    - ``sweep(name)``: ``sweep("examples.models:LlamaBlock", ...)`` from a script that imports
      only torch_nsight.

Each sweep writes what it profiled and whether its own process imported torch
(``summary-*.json``); the results go to ``DIR/sweep_by_name.json``, with a Markdown table
on standard output, and each process's output to ``DIR/logs``.
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

NAMED = """
import json, sys, time
import torch_nsight

started = time.time()
profile = torch_nsight.sweep({model!r}, {shapes!r}, make_inputs={inputs!r}, dtype="bf16",
                             output_dir={out!r}, quiet=True)
k = profile.kernels
summary = {{"kernels": len(k), "profiled": int(k["replicated_from"].isna().sum())
           if "replicated_from" in k else len(k),
           "with_bound": int(k["bound"].notna().sum()),
           "unattributed": int((k["module"] == "(unattributed)").sum()),
           "failures": profile.failures, "sweep_s": time.time() - started,
           "timing": profile.meta.sweeps[0].timing,
           "torch_imported": "torch" in sys.modules}}
open({summary!r}, "w").write(json.dumps(summary, default=str))
"""


def timed(command: list[str], log: Path) -> float:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    started = time.perf_counter()
    with open(log, "w") as out:
        done = subprocess.run(command, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=ROOT,
                              check=False)
    took = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"{command} exited {done.returncode}; see {log}")
    return took


def cases(out: Path) -> dict[str, dict[str, list[str]]]:
    python = sys.executable
    real = "bench/real_model.py"

    def named(case: str, model: str, shapes: list, inputs: str | None) -> list[str]:
        return [python, "-c", NAMED.format(model=model, shapes=shapes, inputs=inputs,
                                           out=str(out / f"{case}-named"),
                                           summary=str(out / f"summary-{case}-named.json"))]

    return {
        "gpt2": {
            "bare": [python, real, "bare"],
            "sweep(model)": [python, real, "sweep", "--metric-set", "fast", "--out",
                             str(out / "gpt2-object")],
            "sweep(name)": named("gpt2", f"{real}:build", [(4, 1024)], f"{real}:make_inputs"),
            "command": [python, "-m", "torch_nsight", "sweep", f"{real}:build", "--shapes",
                        "4x1024", "--inputs", f"{real}:make_inputs", "--dtype", "bf16",
                        "--force", "-o", str(out / "gpt2-command"), "--top", "3"],
        },
        "llama": {
            "nsight-python": [python, "bench/anchor_nsight_python.py"],
            "sweep(model)": [python, "bench/sweep_vs_anchors.py", "--out", str(out),
                             "--mode", "ours-llama-fast"],
            "sweep(name)": named("llama", "examples.models:LlamaBlock",
                                 [(1, 256, 1024), (1, 1024, 1024), (1, 4096, 1024)], None),
        },
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--out", type=Path, default=Path("bench_out/sweep_by_name"))
    parser.add_argument("--only", choices=["gpt2", "llama"], default=None)
    args = parser.parse_args()
    out = args.out.resolve()
    (out / "logs").mkdir(parents=True, exist_ok=True)
    chosen = {name: runs for name, runs in cases(out).items() if args.only in (None, name)}
    seconds: dict[str, dict[str, list[float]]] = {c: {r: [] for r in runs}
                                                  for c, runs in chosen.items()}
    warm_up: dict[str, dict[str, float]] = {c: {} for c in chosen}
    for round_ in range(args.repeats + 1):
        for case, runs in chosen.items():
            for name, command in runs.items():
                log = out / "logs" / f"{case}-{name.replace('(', '_').replace(')', '')}-{round_}.log"
                took = timed(command, log)
                if round_ == 0:
                    warm_up[case][name] = took
                else:
                    seconds[case][name].append(took)
                print(f"{case} {name} round {round_}: {took:.1f} s", file=sys.stderr)
    summaries = {p.stem: json.loads(p.read_text()) for p in out.glob("summary-*.json")}
    for case in chosen:
        if case == "gpt2":
            summaries["summary-gpt2-object"] = json.loads(
                (out / "gpt2-object" / "summary.json").read_text())
    results = {"seconds": seconds, "warm_up": warm_up, "summaries": summaries,
               "medians": {c: {r: statistics.median(v) for r, v in runs.items()}
                           for c, runs in seconds.items()}}
    (out / "sweep_by_name.json").write_text(json.dumps(results, indent=1, default=str))
    for case, medians in results["medians"].items():
        anchor = next(iter(medians.values()))
        print(f"\n| {case} | median | × {next(iter(medians))} |\n|---|---:|---:|")
        for name, median in medians.items():
            print(f"| {name} | {median:.1f} s | {median / anchor:.2f}× |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
