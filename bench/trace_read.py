"""How long ``torch-nsight report`` takes to read a large PyTorch-profiler trace, and how
much memory, beside Python's ``json.load`` of the same file.

    python bench/trace_read.py [--events 300000 1000000] [--old REV] [--repeat 1]
                               [--json OUT.json]

No trace of a million events ships with the project, so this replicates a real recorded
one (``tests/data/timeline_train/trace-0.json.gz``, a GPT-2 training step under
:func:`torch_nsight.timeline`: CPU ops, CUDA calls, kernels, memsets and flow events):
copy ``i`` has its times shifted by ``i`` spans of the trace, its correlation ids by ``i``
times the largest one, and its measured iterations renumbered, so every copy is a new
stretch of the same run. The traces are written as plain ``.json`` into a temporary folder.

Each case runs as a whole process timed from outside (wall seconds, CPU seconds and peak
resident memory from ``os.wait4``; the repeats interleave the cases, so that a busy spell
of a shared machine slows each of them): ``json.load`` of the file (the anchor),
``torch-nsight report`` with this checkout's code, and the same command with the code of
``--old`` (a git revision, exported with ``git archive`` into the temporary folder).

``--shape`` reads a synthetic trace instead (:mod:`bench.synthetic_traces`, written in
the events the recorded traces hold): ``names`` (``--events`` is then the number of
kernels, each of its own name), ``depth`` (the number of nested module ranges) or
``modules`` (events of steps whose blocks hold thousands of distinct module names).

``--by module`` times ``report --by module`` (the module tree) instead of the hotspots.

``--phases`` prints where this checkout's ``load()`` spends its CPU seconds, in one child
per trace: imports, reading (file, msgspec's decoding and filing the events), the tables
(kernels and timeline), the analysis ``load`` runs on them, and rendering what ``report``
prints (the hotspot table, whose analysis runs then, and the timeline verdicts).

``--check`` compares instead: every recorded trace in ``tests/data`` (each as a single
trace file and, where it has one, as its timeline folder) and the replicated traces are
loaded with ``load(..., cache=False)`` by the old code and by this checkout's, and the
kernel and timeline tables must be equal to the last digit.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.synthetic_traces import SHAPES, write_trace  # noqa: E402

RECORDED = ROOT / "tests" / "data" / "timeline_train" / "trace-0.json.gz"
MEASURE = "torch_nsight/sweep;"


def replicate(events: int, out: Path, shape: str = "replicated") -> Path:
    """Write a trace of ``events`` events made of shifted copies of :data:`RECORDED`, or
    the synthetic trace ``shape`` of that size."""
    if shape != "replicated":
        return write_trace(shape, events, out / f"{shape}_{events}.json")
    with gzip.open(RECORDED, "rt", encoding="utf-8") as handle:
        document = json.load(handle)
    base = document["traceEvents"]
    times = [e["ts"] for e in base if isinstance(e.get("ts"), (int, float))]
    span = max(times) - min(times) + 1000.0
    correlations = [e["args"]["correlation"] for e in base
                    if isinstance(e.get("args"), dict) and "correlation" in e["args"]]
    step = max(correlations) + 1
    runs = sum(1 for e in base if str(e.get("name", "")).startswith(MEASURE))
    path = out / f"trace_{events}.json"
    with open(path, "w", encoding="utf-8") as file:
        head = {k: v for k, v in document.items() if k != "traceEvents"}
        file.write(json.dumps(head)[:-1] + ', "traceEvents": [\n')
        written = 0
        copy = 0
        while written < events:
            for event in base:
                if written == events:
                    break
                file.write((",\n" if written else "") + json.dumps(_shifted(
                    event, copy, span, step, runs)))
                written += 1
            copy += 1
        file.write("\n]}\n")
    return path


def _shifted(event: dict[str, Any], copy: int, span: float, step: int,
             runs: int) -> dict[str, Any]:
    if copy == 0:
        return event
    event = dict(event)
    if isinstance(event.get("ts"), (int, float)):
        event["ts"] = round(event["ts"] + copy * span, 3)
    args = event.get("args")
    if isinstance(args, dict) and "correlation" in args:
        event["args"] = {**args, "correlation": args["correlation"] + copy * step}
    if event.get("ph") in ("s", "f") and isinstance(event.get("id"), int):
        event["id"] = event["id"] + copy * step
    name = event.get("name")
    if isinstance(name, str) and name.startswith(MEASURE) and ";run=" in name:
        head, run = name.rsplit(";run=", 1)
        event["name"] = f"{head};run={int(run) + copy * runs}"
    return event


def measure(command: list[str], env: dict[str, str], folder: Path
            ) -> tuple[float, float, float]:
    """(wall seconds, CPU seconds, peak resident MB) of one child process run in
    ``folder`` (never in the checkout, whose package would shadow PYTHONPATH's)."""
    start = time.perf_counter()
    child = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, cwd=folder)
    assert child.stderr is not None
    error = child.stderr.read()
    _, status, usage = os.wait4(child.pid, 0)
    wall = time.perf_counter() - start
    child.returncode = os.waitstatus_to_exitcode(status)
    if child.returncode:
        raise RuntimeError(f"{command} failed: {error.decode(errors='replace')[-2000:]}")
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024.0  # KiB on Linux


def export(revision: str, out: Path) -> Path:
    """The package at ``revision``, exported into ``out`` (for PYTHONPATH)."""
    folder = out / f"old-{revision}"
    folder.mkdir()
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", revision, "torch_nsight"],
                             check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(folder)], input=archive, check=True)
    return folder


_DUMP = """
import pickle, sys, torch_nsight
profile = torch_nsight.load(sys.argv[1], cache=False)
with open(sys.argv[2], "wb") as file:
    pickle.dump((torch_nsight.__file__, profile.kernels, profile.timeline), file)
"""


_PHASES = """
import json, sys, time
from pathlib import Path
stamps, last = {}, time.process_time()
def stamp(name):
    global last
    now = time.process_time()
    stamps[name], last = round(now - last, 2), now
import torch_nsight
from torch_nsight.report.trace import parse_trace
from torch_nsight.report.trace_events import read_trace
stamp("imports")
events = read_trace(Path(sys.argv[1]))
stamp("reading")
parse_trace(events, sys.argv[1])
stamp("tables")
del events
profile = torch_nsight.load(sys.argv[1], cache=False)
stamp("load")
stamps["analysis"] = round(stamps.pop("load") - stamps["reading"] - stamps["tables"], 2)
from torch_nsight.render import render_table
from torch_nsight.render.verdict import render_verdicts
render_table(profile, "hotspots", "plain", 5)
render_verdicts(profile, "plain")
stamp("rendering")
print(json.dumps(stamps))
"""


def phases(out: Path, traces: list[Path]) -> None:
    """Print the CPU seconds of each phase of this checkout's ``load()``."""
    for trace in traces:
        stamps = subprocess.run([sys.executable, "-c", _PHASES, str(trace)], check=True,
                                env={**os.environ, "PYTHONPATH": str(ROOT)}, cwd=out,
                                capture_output=True, text=True).stdout
        print(f"{trace.name}: {stamps.strip()} (CPU seconds)", flush=True)


def check(out: Path, old: Path, traces: list[Path]) -> int:
    """Load each trace with the old and the new code; the number of tables that differ."""
    import pickle

    import pandas as pd

    recorded = sorted((ROOT / "tests" / "data").rglob("*.json.gz"))
    folders = [p.parent for p in recorded if (p.parent / "timeline.json").is_file()]
    differ = 0
    for path in [*recorded, *dict.fromkeys(folders), *traces]:
        tables = []
        for code in (old, ROOT):
            dump = out / "tables.pickle"
            subprocess.run([sys.executable, "-c", _DUMP, str(path), str(dump)], check=True,
                           env={**os.environ, "PYTHONPATH": str(code)}, cwd=out,
                           stderr=subprocess.DEVNULL)
            with open(dump, "rb") as file:
                package, *frames = pickle.load(file)
            assert Path(package).is_relative_to(code), f"{package} is not under {code}"
            tables.append(frames)
        for name, before, after in zip(("kernels", "timeline"), *tables, strict=True):
            try:
                pd.testing.assert_frame_equal(before, after, check_exact=True)
                verdict = f"{len(after)} rows equal"
            except AssertionError as err:
                differ += 1
                verdict = f"DIFFER: {str(err)[:300]}"
            print(f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path.name}"
                  f" {name}: {verdict}", flush=True)
    return differ


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, nargs="+", default=[300_000, 1_000_000])
    parser.add_argument("--old", default="bc1065e", help="revision of the old reader")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--shape", default="replicated", choices=["replicated", *SHAPES],
                        help="the trace read: copies of a recorded one, or a synthetic shape")
    parser.add_argument("--cases", nargs="+", default=["json.load", "old", "new"])
    parser.add_argument("--by", default="hotspot",
                        help="the table report prints (report --by): module for the tree")
    parser.add_argument("--json", type=Path, help="write the results here too")
    parser.add_argument("--phases", action="store_true",
                        help="the CPU seconds of each phase of load() instead of timing")
    parser.add_argument("--check", action="store_true",
                        help="compare the old and new tables instead of timing")
    args = parser.parse_args(argv)
    results = []
    with tempfile.TemporaryDirectory(prefix="trace_read_") as temp:
        out = Path(temp)
        old = export(args.old, out) if "old" in args.cases or args.check else None
        if args.phases:
            phases(out, [replicate(n, out, args.shape) for n in args.events])
            return 0
        if args.check:
            assert old is not None
            return min(1, check(out, old, [replicate(n, out, args.shape) for n in args.events]))
        for events in args.events:
            trace = replicate(events, out, args.shape)
            size_mb = trace.stat().st_size / 1e6
            report = ["-m", "torch_nsight", "report", str(trace), "--top", "5", "--by", args.by]
            commands = {
                "json.load": ([sys.executable, "-c", "import json, sys; "
                               "json.load(open(sys.argv[1], encoding='utf-8'))", str(trace)],
                              None),
                "old": ([sys.executable, *report], old),
                "new": ([sys.executable, *report], ROOT),
            }
            for _ in range(args.repeat):  # interleaved: a busy spell hits every case
                for case in args.cases:
                    command, path = commands[case]
                    env = {**os.environ, "TORCH_NSIGHT_CACHE_DIR": str(out / "cache")}
                    if path is not None:
                        env["PYTHONPATH"] = str(path)
                    wall, cpu, peak = measure(command, env, out)
                    results.append({"shape": args.shape, "by": args.by, "events": events,
                                    "file_mb": round(size_mb, 1),
                                    "case": case, "seconds": round(wall, 2),
                                    "cpu_seconds": round(cpu, 2), "peak_mb": round(peak)})
                    print(f"{events:>9,} events {size_mb:6.1f} MB  {case:<10} "
                          f"{wall:7.2f} s {cpu:7.2f} s CPU {peak:8.0f} MB", flush=True)
            trace.unlink()
    if args.json:
        args.json.write_text(json.dumps(results, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
