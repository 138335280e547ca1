"""The fuzz harness over every input kind (issue 45): saved profiles, report caches, sweep and
timeline manifests, calls files, PyTorch profiler traces and raw Nsight Compute reports.

A case is one damaged copy of a real recorded file of ``tests/data`` (copied to a work
folder; ``tests/data`` is never written), made by ``random.Random(f"{seed}:{kind}:{index}")``
from hostile values: every JSON type, NaN, inf, zero, negative and huge numbers, duplicated
and deleted entries, deep nesting, cut or flipped bytes, and names that hold terminal
escape codes, C1 controls, bidirectional overrides or spreadsheet formulas
(``=HYPERLINK(...)``). :func:`run_case` reads it with :func:`torch_nsight.load`, which must
return a profile or raise :class:`~torch_nsight.TorchNsightError`; a profile is then printed
as ``torch-nsight report`` prints it (hotspots, modules, findings; text, csv, json), its
log lines and standard error captured, and every channel must hold no raw control
character (:data:`RAW`) and no csv cell a spreadsheet would take for a formula. Each case
then goes through one more use (:data:`USES`, rotating with the case): the command line's
``report --csv/--json`` files, its ``--plot`` (matplotlib's Agg), ``compare`` against a
clean copy of its kind (either side), or the timeline plot of each shape that ran; a use
ends in a result or one line of the library's error, and the files it wrote are checked
as its output is.

Used by tests/report/test_fuzz_inputs.py (a seeded subset) and bench/fuzz_inputs.py (the
full run, 5,000 cases and more).
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import csv
import gzip
import io
import json
import logging
import lzma
import os
import random
import re
import shutil
import signal
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch_nsight
from torch_nsight.environment import CACHE_DIR_ENV
from torch_nsight.errors import TorchNsightError

os.environ.setdefault("MPLBACKEND", "Agg")  # plots drawn to files, no display

DATA = Path(__file__).resolve().parents[1] / "data"
SEED = 20261127
#: A case still running after this many seconds is a failure (a hang).
LIMIT_S = 30.0
#: Characters no output channel may hold raw: C0 but newline and tab, DEL, C1 (ESC and CSI
#: among them), the bidirectional embeddings, overrides and isolates, line separators.
RAW = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\u2028\u2029]")
_NUMBER = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?|[+-]?(?:inf|nan)",
                     re.IGNORECASE)

#: Names a hostile file may carry: escape sequences (OSC 8 links, screen clears, CSI in C1),
#: bidirectional overrides, NUL, CR, and text a spreadsheet runs as a formula.
NAMES: tuple[str, ...] = (
    "\x1b]8;;https://example.com\x07click\x1b]8;;\x07", "\x1b[2J\x1b[Hforged line",
    '=HYPERLINK("https://example.com","x")', "+SUM(1,2)", "-2+3+cmd|' /C calc'!A0",
    "@SUM(A1:A9)", "\u202eexe.txt", "\u2066isolated\u2069", "\x9b31mred", "cr\rreturn",
    "nul\x00byte", "bell\x07", "nel\x85line", "=1+1", "two\nlines", "\t=tab", "\u2028sep",
)
#: Values a field may be replaced by: every JSON type, numbers no reader should take as
#: measurements, text that looks like a number.
VALUES: tuple[Any, ...] = (
    None, True, False, 0, -1, -0.0, 1, 3.5, 2**63, 10**30, -(10**30), 1e308, -1e308,
    float("nan"), float("inf"), float("-inf"), "", "12", "abc", [], [1, 2], {}, {"a": 1},
    [[[]]],
)
HOSTILE: tuple[Any, ...] = VALUES + NAMES
#: Nesting deeper than Python's JSON reader recurses.
DEEP = "[" * 100_000 + "]" * 100_000


# --- damaging JSON and bytes -------------------------------------------------------------

def json_paths(document: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """The paths of every node of a JSON document (keys and list indices)."""
    found = [path]
    if isinstance(document, dict):
        for key, value in document.items():
            found += json_paths(value, (*path, key))
    elif isinstance(document, list):
        for index, value in enumerate(document):
            found += json_paths(value, (*path, index))
    return found


def _parent(document: Any, path: tuple[Any, ...]) -> Any:
    for step in path[:-1]:
        document = document[step]
    return document


def mutate_document(document: Any, rng: random.Random, focus: tuple[str, ...] = ()) -> Any:
    """A damaged deep copy of a JSON document: one to three nodes replaced by a hostile
    value or name, deleted, or their list's entries duplicated, dropped or multiplied."""
    changed = copy.deepcopy(document)
    for _ in range(rng.choice((1, 1, 2, 3))):
        nodes = json_paths(changed)
        if focus and rng.random() < 0.75:
            nodes = [p for p in nodes if any(k in p for k in focus)] or nodes
        path = rng.choice(nodes)
        if not path:
            return rng.choice(HOSTILE) if rng.random() < 0.5 else changed
        parent, key, roll = _parent(changed, path), path[-1], rng.random()
        value = parent[key]
        if roll < 0.15:
            del parent[key]
        elif roll < 0.3 and isinstance(value, list) and value:
            how = rng.choice(("duplicate", "triple", "drop", "many"))
            parent[key] = (value + value[:1] if how == "duplicate" else value * 3
                           if how == "triple" else value[1:] if how == "drop"
                           else value * (20_000 // len(value) + 1))
        elif roll < 0.45 and isinstance(value, str):
            parent[key] = rng.choice(NAMES) + (value if rng.random() < 0.5 else "")
        else:
            parent[key] = copy.deepcopy(rng.choice(HOSTILE))
    return changed


def dump(document: Any, rng: random.Random) -> bytes:
    """``document`` as JSON, sometimes nested past any recursion limit, cut or flipped."""
    text = json.dumps(document)
    if rng.random() < 0.04:
        at = rng.randrange(len(text) + 1)
        text = text[:at] + DEEP + text[at:] if rng.random() < 0.3 else DEEP
    return mutate_bytes(text.encode(), rng)


def mutate_bytes(data: bytes, rng: random.Random, damage: float = 0.2) -> bytes:
    """``data`` as it is most of the time; with ``damage`` odds, cut short or flipped."""
    roll = rng.random()
    if roll >= damage or not data:
        return data
    if roll < damage / 2:
        return data[:rng.randrange(len(data))]
    flipped = bytearray(data)
    start = rng.randrange(len(flipped))
    for i in range(rng.choice((1, 4, 64))):
        if start + i < len(flipped):
            flipped[start + i] = rng.randrange(256)
    return bytes(flipped)


# --- the recorded files the cases damage --------------------------------------------------

@dataclass
class Seeds:
    """The recorded files, copied once to ``work``, and what the makers read from them.

    Attributes:
        work: a folder of this run (the copies, their caches, the shared sources).
        cache_dir: where the caches of every case go (never beside tests/data).
    """

    work: Path
    cache_dir: Path = field(init=False)
    documents: dict[str, Any] = field(default_factory=dict)
    saved: list[Path] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.cache_dir = self.work / "caches"
        seeds = self.work / "seeds"
        seeds.mkdir(parents=True, exist_ok=True)
        shutil.copy2(DATA / "hand_s128.ncu-rep.xz", seeds / "hand.ncu-rep.xz")
        self.report = seeds / "hand.ncu-rep.xz"
        self.raw_report = lzma.decompress(self.report.read_bytes())
        with gzip.open(DATA / "graph_captured_timeline" / "trace.json.gz", "rt") as handle:
            self.documents["trace"] = json.load(handle)
        launches = DATA / "outside_lstm" / "replicated" / "launches"
        for name, path in (("timeline", DATA / "graph_captured_timeline" / "timeline.json"),
                           ("sweep", DATA / "findings_gemm" / "sweep.json"),
                           ("calls", DATA / "hand_s128.calls.json"),
                           ("plan", launches / "plan.json"),
                           ("launch_timeline", launches / "timeline.json")):
            self.documents[name] = json.loads(path.read_text())
        for name, source in (("timeline", DATA / "timeline_decode"),
                             ("report", self.report)):
            saved = seeds / f"{name}.parquet"
            torch_nsight.load(source, cache_dir=self.cache_dir).save(saved)
            self.saved.append(saved)
        self.saved.append(DATA / "profile_format1.parquet")  # an older format, read as is
        self.clean_trace = seeds / "clean.json"  # the baseline of a trace's comparison
        self.clean_trace.write_text(json.dumps(self.documents["trace"]))

    def shared(self, name: str, source: Path) -> Path:
        """A copy of ``source`` under ``work/name`` that cases of one kind share (its
        report's cache then read once), made on first use."""
        target = self.work / name
        if not target.exists():
            if source.is_dir():
                shutil.copytree(source, target)
            else:
                target.mkdir()
                shutil.copy2(source, target / source.name)
        return target


# --- one maker per input kind: (seeds, rng, case folder) -> the path to load ----------------

def _hostile_column(values: list[Any], rng: random.Random, text: bool) -> list[Any]:
    pool = NAMES + ("", None) if text else VALUES[:16]
    share = rng.choice((0.1, 0.5, 1.0))
    return [copy.deepcopy(rng.choice(pool)) if rng.random() < share else v for v in values]


def _damaged_table(table: Any, rng: random.Random) -> Any:
    """A pyarrow table with one column's values, type or name damaged, or its rows gone."""
    import pyarrow as pa

    names = table.schema.names
    name = rng.choice(names)
    index = names.index(name)
    column = table.column(name)
    roll = rng.random()
    if roll < 0.55:
        text = pa.types.is_string(column.type) or pa.types.is_large_string(column.type)
        values = _hostile_column(column.to_pylist(), rng, text)
        try:
            changed = pa.array(values, type=column.type if text else None)
        except (pa.ArrowException, OverflowError, TypeError, ValueError):
            changed = pa.array([None if v is None else json.dumps(v) for v in values])
        return table.set_column(index, name, changed)
    if roll < 0.7:  # another type: text for numbers, numbers for text
        kind = rng.choice(("text", "int", "float", "bool"))
        rows = table.num_rows
        changed = (pa.array([rng.choice(NAMES) for _ in range(rows)]) if kind == "text"
                   else pa.array([rng.choice((0, -1, 2**62)) for _ in range(rows)])
                   if kind == "int" else pa.array([rng.choice((0.0, -1.0, 1e300, float("nan")))
                                                   for _ in range(rows)])
                   if kind == "float" else pa.array([rng.random() < 0.5 for _ in range(rows)]))
        return table.set_column(index, name, changed)
    if roll < 0.8:
        return table.remove_column(index)
    if roll < 0.9:
        renamed = list(names)
        renamed[index] = rng.choice((*NAMES, names[(index + 1) % len(names)]))
        return table.rename_columns(renamed)
    return table.slice(0, rng.choice((0, 1)))


def make_saved(seeds: Seeds, rng: random.Random, folder: Path) -> Path:
    """A saved profile (Profile.save) with damaged columns, types, metadata or bytes."""
    import pyarrow.parquet as pq

    table = pq.read_table(rng.choice(seeds.saved))
    for _ in range(rng.choice((1, 1, 2, 3))):
        metadata = dict(table.schema.metadata or {})
        keys = [k for k in metadata if k.startswith(b"torch_nsight")]
        if keys and rng.random() < 0.35:
            key = rng.choice(keys)
            with contextlib.suppress(ValueError, RecursionError):  # damaged by a step before
                metadata[key] = dump(mutate_document(
                    json.loads(metadata[key]), rng, ("meta", "format", "device", "gpu",
                                                     "name")), random.Random(rng.random()))
            table = table.replace_schema_metadata(metadata)
        else:
            table = _damaged_table(table, rng)
    names = [n for n in NAMES if "/" not in n and "\x00" not in n]
    path = folder / rng.choice(("profile.parquet", f"{rng.choice(names)}.parquet"))
    pq.write_table(table, path)
    path.write_bytes(mutate_bytes(path.read_bytes(), rng, 0.1))
    return path


def make_cache(seeds: Seeds, rng: random.Random, folder: Path) -> Path:
    """A copy of a real report with a damaged cache beside it: forged (its key and table
    digest made to match the damaged table or metadata), edited after it was written (the
    digest kept), or cut short."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from torch_nsight.report import SCHEMA_VERSION, cache_path, read_report
    from torch_nsight.report.cache import write_cache

    report = folder / "hand.ncu-rep.xz"
    shutil.copy2(seeds.report, report)
    cache_dir = folder / "caches"
    table, meta = read_report(seeds.report, cache_dir=seeds.cache_dir)
    roll = rng.random()
    if roll < 0.6:  # forged: hostile content that the cache's checks accept
        arrow = pa.Table.from_pandas(table, preserve_index=False)
        if rng.random() < 0.7:
            arrow = _damaged_table(arrow, rng)
        if rng.random() < 0.5:
            meta = mutate_document(meta, rng, ("gpu", "device", "name", "clock"))
        try:  # a frame Arrow cannot hold (two columns of one name) is no cache
            frame = arrow.to_pandas()
            written = write_cache(report, frame, meta, SCHEMA_VERSION, cache_dir)
        except (pa.ArrowException, ValueError):
            written = None
        if written is None:
            write_cache(report, table, meta, SCHEMA_VERSION, cache_dir)
        return report
    path = write_cache(report, table, meta, SCHEMA_VERSION, cache_dir)
    assert path == cache_path(report, cache_dir)
    if roll < 0.85:  # edited after it was written: the key and digest kept
        arrow = pq.read_table(path)
        pq.write_table(_damaged_table(arrow, rng).replace_schema_metadata(
            arrow.schema.metadata), path)
    else:
        path.write_bytes(mutate_bytes(path.read_bytes(), rng, 1.0))
    return report


def make_manifest(seeds: Seeds, rng: random.Random, folder: Path) -> Path:
    """A sweep (its report and its cache shared) or timeline folder whose manifest has
    duplicated, missing, mistyped, deep or huge entries."""
    if rng.random() < 0.6:
        target = seeds.shared("sweep", DATA / "findings_gemm")
        document, manifest = seeds.documents["sweep"], "sweep.json"
        focus: tuple[str, ...] = ("items", "child", "record", "variants", "shapes",
                                  "options", "format", "kind", "replication")
    else:
        target = seeds.shared("timeline", DATA / "graph_captured_timeline")
        document, manifest = seeds.documents["timeline"], "timeline.json"
        focus = ("items", "trace", "device", "settings", "format", "kind", "variant")
    (target / manifest).write_bytes(dump(mutate_document(document, rng, focus), rng))
    return target


def make_calls(seeds: Seeds, rng: random.Random, folder: Path) -> Path:
    """A real report (shared, its cache read once) with a damaged calls file beside it."""
    target = seeds.shared("calls", seeds.report)
    document = mutate_document(seeds.documents["calls"], rng,
                               ("rows", "range_stack", "op", "flops", "bytes", "count",
                                "input_shapes", "format", "kind"))
    (target / "hand.calls.json").write_bytes(dump(document, rng))
    return target / seeds.report.name


def make_trace(seeds: Seeds, rng: random.Random, folder: Path) -> Path:
    """A PyTorch profiler trace (.json or .json.gz) with damaged events or bytes."""
    data = dump(mutate_document(seeds.documents["trace"], rng,
                                ("name", "args", "ts", "dur", "ph", "cat", "tid", "pid",
                                 "deviceProperties", "traceEvents")), rng)
    if rng.random() < 0.3:
        path = folder / "trace.json.gz"
        path.write_bytes(mutate_bytes(gzip.compress(data), rng, 0.3))
    else:
        path = folder / "trace.json"
        path.write_bytes(data)
    return path


def make_report(seeds: Seeds, rng: random.Random, folder: Path) -> Path:
    """A real report cut short or overwritten: its xz container, or its content (written
    raw, or compressed again)."""
    roll = rng.random()
    if roll < 0.3:
        path = folder / "run.ncu-rep.xz"
        path.write_bytes(mutate_bytes(seeds.report.read_bytes(), rng, 1.0))
        return path
    damaged = mutate_bytes(seeds.raw_report, rng, 1.0)
    if roll < 0.7:
        path = folder / "run.ncu-rep"
        path.write_bytes(damaged)
    else:
        path = folder / "run.ncu-rep.xz"
        path.write_bytes(lzma.compress(damaged, preset=0))
    return path


def make_launches(seeds: Seeds, rng: random.Random, folder: Path) -> Path:
    """A report profiled with ``--replicate-launches`` (shared, its cache read once) whose
    launch plan, launch list manifest or launch list trace is damaged (each case writes all
    three, so that no case inherits another's damage)."""
    source = DATA / "outside_lstm" / "replicated"
    target = seeds.shared("launches", source)
    roll = rng.random()
    plan, manifest = seeds.documents["plan"], seeds.documents["launch_timeline"]
    if roll < 0.5:
        plan = mutate_document(plan, rng, ("invocations", "launches", "profiled", "report",
                                           "format", "kind"))
    elif roll < 0.8:
        manifest = mutate_document(manifest, rng, ("items", "trace", "format", "kind"))
    (target / "launches" / "plan.json").write_bytes(dump(plan, rng) if roll < 0.5 else
                                                    json.dumps(plan).encode())
    (target / "launches" / "timeline.json").write_bytes(
        dump(manifest, rng) if 0.5 <= roll < 0.8 else json.dumps(manifest).encode())
    trace = (source / "launches" / "trace.json.gz").read_bytes()
    (target / "launches" / "trace.json.gz").write_bytes(
        mutate_bytes(trace, rng, 0.3) if roll >= 0.8 else trace)
    return target / "report.ncu-rep.xz"


MAKERS: dict[str, Callable[[Seeds, random.Random, Path], Path]] = {
    "saved": make_saved, "cache": make_cache, "manifest": make_manifest, "calls": make_calls,
    "trace": make_trace, "report": make_report, "launches": make_launches}


# --- reading a case and checking what it prints --------------------------------------------

@dataclass
class Outcome:
    """How one case ended.

    Attributes:
        case: ``kind:index``.
        ending: ``loaded``, ``refused`` (the library's error) or ``failed`` (any other
            exception, or a hang).
        problems: what went wrong (a traceback's last frames, a raw character, a formula
            cell), one entry each: the case passes when there is none.
    """

    case: str
    ending: str
    problems: list[str] = field(default_factory=list)


class Hung(Exception):
    """A case still running after :data:`LIMIT_S`."""


@contextlib.contextmanager
def time_limit(seconds: float) -> Iterator[None]:
    """Raise :class:`Hung` in this (main) thread after ``seconds``."""
    def hung(signum: int, frame: Any) -> None:
        raise Hung(f"still running after {seconds} s")

    previous = signal.signal(signal.SIGALRM, hung)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@contextlib.contextmanager
def captured_channels() -> Iterator[dict[str, io.StringIO]]:
    """Standard output and error, and the log lines as the command line formats them."""
    from torch_nsight.cli.text import LogFormatter

    channels = {"stdout": io.StringIO(), "stderr": io.StringIO(), "log": io.StringIO()}
    handler = logging.StreamHandler(channels["log"])
    handler.setFormatter(LogFormatter())
    handler.setLevel(logging.INFO)
    library = logging.getLogger("torch_nsight")
    level, library.level = library.level, logging.INFO
    library.addHandler(handler)
    try:
        with contextlib.redirect_stdout(channels["stdout"]), \
                contextlib.redirect_stderr(channels["stderr"]):
            yield channels
    finally:
        library.removeHandler(handler)
        library.setLevel(level)


#: The ways a loaded case is printed, as ``torch-nsight report --by BY --format FORMAT``
#: (``--findings`` under a text table): case ``index`` prints the ``index``-th of them (every
#: table and format computes the same analysis again; one a case keeps a run short).
PRINTS: tuple[tuple[str, str], ...] = tuple(
    (by, fmt) for fmt in ("plain", "csv", "markdown", "json")
    for by in ("hotspot", "module", "finding"))


def print_profile(profile: Any, index: int, out: io.StringIO) -> dict[str, str]:
    """Print ``profile`` the ``index``-th way of :data:`PRINTS` to ``out``; return the csv
    printed, by table, if it was csv."""
    from torch_nsight.cli.report import emit, settle_table_options

    by, fmt = PRINTS[index % len(PRINTS)]
    args = argparse.Namespace(by=by, sort=None, fmt=fmt, n=None, depth=None, fold=True,
                              findings=by != "finding")
    settle_table_options(args)
    stream = io.StringIO()
    emit(profile, args, stream)
    out.write(stream.getvalue())
    return {by: stream.getvalue()} if fmt == "csv" else {}


#: What a case does with its input after ``report``'s table (:func:`use_case`): case
#: ``index`` does the ``index``-th.
USES = ("outputs", "plot", "compare", "timeline")


def use_case(seeds: Seeds, kind: str, index: int, path: Path, cache_dir: Path,
             folder: Path) -> dict[str, str]:
    """Use the case's input the ``index``-th way of :data:`USES`, through the command line
    (:func:`torch_nsight.cli.main.main`: its standard output and error are the case's) or,
    for the timeline plot, the function ``torch-nsight timeline --plot-timeline`` calls.

    Returns:
        The text files it wrote (csv, json, svg), by name: they are checked as the output
        channels are.

    Raises:
        Exception: any but :class:`~torch_nsight.TorchNsightError` (one line from the
            command line), a bug.
    """
    from torch_nsight.cli.main import main

    use = USES[index % len(USES)]
    out = folder / "out"
    out.mkdir(exist_ok=True)
    previous = os.environ.get(CACHE_DIR_ENV)
    os.environ[CACHE_DIR_ENV] = str(cache_dir)
    try:
        if use == "outputs":
            by = ("hotspot", "module", "finding", "kernel_name", "launch", "shape")[
                index // len(USES) % 6]
            main(["report", str(path), "--by", by, "--csv", str(out / "table.csv"),
                  "--json", str(out / "table.json")])
        elif use == "plot":
            main(["report", str(path), "--plot", str(out / "roofline.svg"),
                  "--plot-scaling", str(out / "scaling.png")])
        elif use == "compare":
            clean = seeds.clean_trace if kind in ("trace", "manifest") else seeds.report
            sides = [str(clean), str(path)]
            if index // len(USES) % 2:  # the damaged side as the baseline
                sides.reverse()
            by = ("module", "kernel")[index // (2 * len(USES)) % 2]
            fmt = ("table", "csv", "json", "markdown")[index // (4 * len(USES)) % 4]
            main(["compare", *sides, "--by", by, "--format", fmt])
        else:
            _plot_timelines(path, cache_dir, out)
    except TorchNsightError:
        pass  # what the command line turns into one line; the plot's caller too
    finally:
        if previous is None:
            os.environ.pop(CACHE_DIR_ENV, None)
        else:
            os.environ[CACHE_DIR_ENV] = previous
    return {f.name: f.read_text(errors="replace") for f in sorted(out.iterdir())
            if f.suffix in (".csv", ".json", ".svg")}


def _plot_timelines(path: Path, cache_dir: Path, out: Path) -> None:
    """The timeline plot of each shape whose step ran, as ``torch-nsight timeline
    --plot-timeline`` draws them, or of the one step of a trace without shape labels (a
    profile without a timeline or GPU activity draws none)."""
    from torch_nsight.render import plot_timeline

    profile = torch_nsight.load(path, cache_dir=cache_dir)
    steps = profile.timeline
    if steps is None or profile.kernels.empty:
        return
    ran = set(steps.loc[steps["kind"] == "step", "shape"])
    if not profile.shapes and ran:  # a trace without shape labels: its one step
        plot_timeline(profile, out / "timeline-0.svg")
    for number, shape in enumerate(profile.shapes):
        if shape in ran:
            plot_timeline(profile, out / f"timeline-{number}.svg", shape=shape)


def raw_characters(text: str, channel: str) -> list[str]:
    """One problem per raw control character in ``text`` (with what surrounds it)."""
    return [f"raw {match.group()!r} on {channel}: "
            f"{text[max(0, match.start() - 30):match.end() + 30]!r}"
            for match in RAW.finditer(text)][:3]


def formula_cells(text: str, table: str) -> list[str]:
    """One problem per csv cell a spreadsheet would run as a formula."""
    found = []
    for row in csv.reader(io.StringIO(text)):
        for cell in row:
            if cell[:1] in ("=", "+", "-", "@", "\t", "\r") and not _NUMBER.fullmatch(cell):
                found.append(f"formula cell in the {table} csv: {cell[:60]!r}")
    return found[:3]


def where(err: BaseException) -> str:
    """The last frames of torch_nsight (or of this harness) that ``err`` passed, and the
    frame that raised it."""
    frames = traceback.extract_tb(err.__traceback__)
    ours = [f for f in frames if "torch_nsight" in f.filename or "fuzz_inputs" in f.filename]
    chosen = ours[-3:] + [f for f in frames[-1:] if not ours or f is not ours[-1]]
    return "".join(traceback.format_list(chosen))


def run_case(seeds: Seeds, kind: str, index: int, seed: int = SEED) -> Outcome:
    """Make case ``index`` of ``kind``, load it, print it, check every channel.

    Args:
        seeds: the recorded files.
        kind: a key of :data:`MAKERS`.
        index: the case's number.
        seed: the run's seed (the case is ``random.Random(f"{seed}:{kind}:{index}")``).

    Returns:
        How the case ended.
    """
    outcome = Outcome(f"{kind}:{index}", "failed")
    folder = seeds.work / "cases" / f"{kind}-{index}"
    folder.mkdir(parents=True, exist_ok=True)
    cache_dir = folder / "caches" if kind == "cache" else seeds.cache_dir
    try:
        with time_limit(LIMIT_S), captured_channels() as channels:
            path = MAKERS[kind](seeds, random.Random(f"{seed}:{kind}:{index}"), folder)
            try:
                profile = torch_nsight.load(path, cache_dir=cache_dir)
            except TorchNsightError as err:
                outcome.ending = "refused"
                channels["error"] = io.StringIO(str(err))
            else:
                outcome.ending = "loaded"
                for table, text in print_profile(profile, index, channels["stdout"]).items():
                    outcome.problems += formula_cells(text, table)
            written = use_case(seeds, kind, index, path, cache_dir, folder)
            for name, text in written.items():
                channels[name] = io.StringIO(text)
                if name.endswith(".csv"):
                    outcome.problems += formula_cells(text, name)
        for channel, text in channels.items():
            if channel != "error":  # the command line escapes it: see errors_are_escaped
                outcome.problems += raw_characters(text.getvalue(), channel)
    except (Exception, Hung) as err:  # noqa: BLE001 - every other ending is a bug
        outcome.ending = "failed"
        outcome.problems.append(f"{type(err).__name__}: {str(err)[:300]}\n" + where(err))
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return outcome
