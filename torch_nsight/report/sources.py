"""The sources :func:`torch_nsight.load` reads, one reader each, all giving the same raw table.

A reader turns a file or folder into a :class:`SourceData`: the raw kernel table
(:data:`~torch_nsight.report.table.RAW_COLUMNS`: names, launch shape, metrics, and the range
stack around each kernel, whatever recorded it), the :class:`~torch_nsight.record.Source`
records saying where the rows came from, and what else the source knows (replicated sibling
groups, the calls table, sweep records, PyTorch settings). Nothing downstream knows which
reader ran. Readers are tried in :data:`READERS` order; :func:`register_reader` adds one.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import pandas as pd

from torch_nsight import formats, naming
from torch_nsight.errors import ReportError
from torch_nsight.record import Source, SweepRecord
from torch_nsight.report import saved
from torch_nsight.report.compiled import read_maps, resolve_compiled, take_carried
from torch_nsight.report.table import read_report

logger = logging.getLogger(__name__)

REPORT_SUFFIXES = (".ncu-rep", ".ncu-rep.xz")
_RANK_NAME = re.compile(r"rank(\d+)$")
CALLS_COLUMNS = ("source", "variant", "shape", "range_stack", "range_start_end",
                 "range_other", "aten_op", "input_shapes", "input_dtypes", "output_shapes",
                 "output_dtypes", "flops", "bytes", "count")


@dataclass
class ReadOptions:
    """How sources are read.

    Attributes:
        cache: keep each report's tidy table in a cache (see :mod:`~torch_nsight.report.cache`).
        cache_dir: where caches go (None: beside each report, or ``$TORCH_NSIGHT_CACHE_DIR``).
    """

    cache: bool = True
    cache_dir: str | os.PathLike[str] | None = None


@dataclass
class SourceData:
    """What one reader read.

    Attributes:
        kernels: the raw table (or, with ``analyzed``, a table analysed before it was saved).
        sources: where its rows came from.
        analyzed: the table is already analysed (a saved profile).
        replication: sibling groups whose representative's rows stand for the replicas
            (``representative``, ``replicas``, ``variant``, ``shape``).
        calls: the raw calls table (:data:`CALLS_COLUMNS`), or None.
        sweeps: the sweeps that made it.
        settings: PyTorch settings of the profiled process, where known.
        timeline: step windows and idle gaps of a PyTorch profiler trace
            (:data:`~torch_nsight.report.trace.TIMELINE_COLUMNS`), or None.
    """

    kernels: pd.DataFrame
    sources: list[Source]
    analyzed: bool = False
    replication: list[dict[str, Any]] = field(default_factory=list)
    calls: pd.DataFrame | None = None
    sweeps: list[SweepRecord] = field(default_factory=list)
    settings: dict[str, Any] = field(default_factory=dict)
    timeline: pd.DataFrame | None = None


class SourceReader(Protocol):
    """Reads one kind of source."""

    name: str

    def accepts(self, path: Path) -> bool:
        """Whether this reader reads ``path``."""

    def read(self, path: Path, options: ReadOptions) -> SourceData:
        """Read ``path``.

        Raises:
            ReportError: it cannot be read.
        """


def is_report(path: Path) -> bool:
    """Whether ``path`` is named like an Nsight Compute report."""
    return path.name.endswith(REPORT_SUFFIXES)


def range_note(frame: pd.DataFrame) -> str | None:
    """Why a raw table's kernels cannot be attributed to modules, with the fix; None if some
    kernel ran inside a torch_nsight module range."""
    if frame.empty:
        return None
    for stack in frame["range_stack"]:
        if any(naming.parse_message(m).kind == "module" and m != naming.MEASURE_MESSAGE
               and naming.parse_measure_range(m) is None and m != naming.WARMUP_MESSAGE
               for m in stack or ()):
            return None
    other = [m for ranges in frame["range_other"] for m in ranges or ()]
    fix = ("wrap the model in torch_nsight.instrument() while ncu records it with --nvtx, "
           "or profile with torch_nsight.sweep()")
    if any(m.startswith("aten::") or ", seq = " in m for m in other):
        return ("its NVTX ranges name aten ops (torch.autograd.profiler.emit_nvtx or nsys "
                "--pytorch=autograd-nvtx), not modules, so no kernel is attributed: " + fix)
    if not other and not any(frame["range_start_end"].map(bool)):
        return "it carries no NVTX ranges (recorded without `ncu --nvtx`?): " + fix
    return "none of its kernels ran inside a torch_nsight module range: " + fix


def report_source(path: Path, kind: str, frame: pd.DataFrame,
                  meta: Mapping[str, Any]) -> Source:
    """The :class:`Source` of one Nsight Compute report, from its table and metadata; its
    note says why no kernel is attributed, when none is."""
    gpu = meta.get("gpu")
    note = range_note(frame)
    return Source(path=str(path.resolve()), kind=kind,
                  gpu=tuple(gpu if isinstance(gpu, list) else [gpu] if gpu else []),
                  ncu_version=meta.get("ncu_version"), reader_version=meta.get("reader_version"),
                  metric_set=meta.get("metric_set"),
                  missing_metrics=tuple(meta.get("missing_metrics") or ()),
                  has_module_ranges=note is None, note=note)


def _sweep_note(path: Path, frame: pd.DataFrame) -> str | None:
    """A child's report of a sweep whose directory holds replicated rows it lacks."""
    if not formats.is_sweep_dir(path.parent):
        return None
    if not any(naming.parse_measure_range(m) for ranges in frame["range_start_end"]
               for m in ranges or ()):
        return None
    try:
        manifest = formats.read_tagged(path.parent / formats.SWEEP_MANIFEST,
                                       formats.SWEEP_KIND, formats.SWEEP_FORMAT)
    except formats.FormatError:
        return None
    if not manifest.get("replication"):
        return None
    return (f"it is one report of the sweep in {path.parent}, whose replicated layers are "
            f"not in it: load the directory ({path.parent}) to get every row")


class NcuReport:
    """``.ncu-rep`` / ``.ncu-rep.xz`` files written by ``ncu -o``, with the calls file
    (``NAME.calls.json``) beside them when there is one."""

    name = "ncu-report"

    def accepts(self, path: Path) -> bool:
        """Files named ``*.ncu-rep`` or ``*.ncu-rep.xz``."""
        return is_report(path)

    def read(self, path: Path, options: ReadOptions) -> SourceData:
        """Read the report (through its cache when allowed)."""
        frame, meta = read_report(path, cache=options.cache, cache_dir=options.cache_dir)
        frame["rank"] = pd.Series([rank_of(path)] * len(frame), index=frame.index,
                                  dtype="Int64")
        frame, carried = split_carried_calls(frame, path)
        frame = attribute_compiled(frame, path)
        source = report_source(path, self.name, frame, meta)
        if source.note is None:
            source = dataclasses.replace(source, note=_sweep_note(path, frame))
        calls_file = calls_beside(path)
        if calls_file.is_file():
            calls = read_calls(calls_file)
        else:
            calls = calls_frame(carried, str(path.resolve())) if carried is not None else None
        return SourceData(frame, [source], calls=calls)


def split_carried_calls(frame: pd.DataFrame, path: Path
                        ) -> tuple[pd.DataFrame, list[dict[str, Any]] | None]:
    """Take the calls table a report carries (:mod:`torch_nsight.capture.embed`) out of it.

    Returns:
        (the kernel table without the carrier kernels, the calls rows or None). A damaged
        message is logged and skipped.
    """
    frame, messages = take_carried(frame, formats.CALLS_MESSAGE_PREFIX)
    tables = []
    for message in messages:
        try:
            tables.append(check_call_rows(formats.decode_calls(message), str(path)))
        except (formats.FormatError, ReportError) as err:
            logger.warning("%s: skipping a carried calls table: %s", path.name, err)
    if len(tables) > 1:
        logger.warning("%s carries %d calls tables (several instrumented models?): the "
                       "first is used", path.name, len(tables))
    return frame, tables[0] if tables else None


def attribute_compiled(frame: pd.DataFrame, path: Path) -> pd.DataFrame:
    """Give the kernels of compiled graphs the modules their carried maps name
    (:mod:`torch_nsight.report.compiled`), the carrier kernels taken out."""
    frame, messages = take_carried(frame, formats.COMPILED_MAP_PREFIX)
    return resolve_compiled(frame, read_maps(messages, path.name))


def rank_of(report: Path) -> int | None:
    """The distributed rank a report was recorded for, from its name (``report-rank0``, as
    ``torch-nsight profile --ranks`` names them), or None."""
    match = _RANK_NAME.search(calls_beside(report).name.removesuffix(formats.CALLS_SUFFIX))
    return int(match.group(1)) if match else None


def calls_beside(report: Path) -> Path:
    """Where the calls file of ``report`` is looked for: ``run.calls.json`` for
    ``run.ncu-rep`` or ``run.ncu-rep.xz``."""
    stem = report.name
    for suffix in sorted(REPORT_SUFFIXES, key=len, reverse=True):
        if stem.endswith(suffix):
            stem = stem[: -len(suffix)]
            break
    return report.with_name(stem + formats.CALLS_SUFFIX)


def calls_frame(rows: Sequence[Mapping[str, Any]], source: str) -> pd.DataFrame:
    """The raw calls table of calls-file rows (see :mod:`torch_nsight.formats`)."""
    records = []
    for row in rows:
        records.append({
            "source": source, "variant": row.get("variant") or None,
            "shape": row.get("shape") or None,
            "range_stack": tuple(row.get("range_stack") or ()), "range_start_end": (),
            "range_other": (), "aten_op": row.get("op"),
            "input_shapes": _shapes(row.get("input_shapes")),
            "input_dtypes": tuple(row.get("input_dtypes") or ()),
            "output_shapes": _shapes(row.get("output_shapes")),
            "output_dtypes": tuple(row.get("output_dtypes") or ()),
            "flops": row.get("flops"), "bytes": row.get("bytes"),
            "count": int(row.get("count") or 1)})
    frame = pd.DataFrame.from_records(records, columns=list(CALLS_COLUMNS))
    frame[["flops", "bytes"]] = frame[["flops", "bytes"]].astype("float64")
    return frame


def _shapes(value: Any) -> tuple[tuple[int, ...], ...]:
    return tuple(tuple(int(d) for d in shape) if isinstance(shape, (list, tuple)) else ()
                 for shape in value or ())


def read_call_rows(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Read the rows of a calls file (:meth:`torch_nsight.capture.calls.CallRecorder.write`).

    Args:
        path: The JSON file.

    Returns:
        The rows, as :meth:`CallRecorder.rows` returns them (tuples for the range stack,
        shapes and dtypes).

    Raises:
        ReportError: If the file is not JSON, not a torch_nsight calls file, of a newer
            format, or a row lacks a field.
        OSError: If the file cannot be read.
    """
    path = Path(path)
    text = path.read_text(encoding="utf-8")
    try:
        document = json.loads(text)
    except json.JSONDecodeError as err:
        raise ReportError(f"{path} is not a torch_nsight calls file: it is not JSON "
                          f"({err})") from err
    if not isinstance(document, dict) or document.get("kind") != formats.CALLS_KIND:
        kind = document.get("kind") if isinstance(document, dict) else type(document).__name__
        raise ReportError(f"{path} is not a torch_nsight calls file (kind {kind!r}, expected "
                          f"{formats.CALLS_KIND!r}); pass the file written by CallRecorder.write()")
    return check_call_rows(document, str(path))


def check_call_rows(document: dict[str, Any], path: str) -> list[dict[str, Any]]:
    """The rows of a calls document (a calls file's JSON, or a carried one), checked.

    Raises:
        ReportError: of a newer format, without rows, or a row lacks a field (the message
            names ``path``, the file it came from).
    """
    fmt = document.get("format")
    if not isinstance(fmt, int) or isinstance(fmt, bool) or fmt < 1 or fmt > formats.CALLS_FORMAT:
        raise ReportError(f"{path} holds a calls table of format {fmt!r}; this torch_nsight reads "
                          f"formats 1 to {formats.CALLS_FORMAT}: upgrade torch_nsight to read it")
    rows = document.get("rows")
    if not isinstance(rows, list):
        raise ReportError(f"{path} has no list of rows: the file is damaged")
    out = []
    for index, row in enumerate(rows):
        missing = [k for k in formats.CALLS_ROW_KEYS if not isinstance(row, dict) or k not in row]
        if missing:
            raise ReportError(f"{path}: row {index} lacks {missing}: the file is damaged")
        out.append({**row, "range_stack": tuple(row["range_stack"]),
                    "input_shapes": tuple(tuple(s) for s in row["input_shapes"]),
                    "input_dtypes": tuple(row["input_dtypes"]),
                    "output_shapes": tuple(tuple(s) for s in row["output_shapes"]),
                    "output_dtypes": tuple(row["output_dtypes"])})
    return out


def read_calls(path: Path) -> pd.DataFrame:
    """Read a calls file written by ``instrument(model, record_calls=PATH)`` as a raw calls
    table.

    Raises:
        ReportError: it is not a calls file.
    """
    return calls_frame(read_call_rows(path), str(Path(path).resolve()))


class SavedProfile:
    """Parquet files written by :meth:`torch_nsight.Profile.save` (any format version)."""

    name = "profile"

    def accepts(self, path: Path) -> bool:
        """Files named ``*.parquet`` that are not report caches."""
        return path.suffix.lower() == ".parquet" and not path.name.endswith(".tn-cache.parquet")

    def read(self, path: Path, options: ReadOptions) -> SourceData:
        """Read the saved tables and metadata."""
        kernels, calls, meta = saved.read_profile(path)
        return SourceData(kernels, list(meta.sources), analyzed=True, calls=calls,
                          sweeps=list(meta.sweeps), settings=dict(meta.settings),
                          timeline=saved.read_timeline(path))


class SweepDirectory:
    """A sweep's output directory: every child's report, the replicated rows, the calls
    table and how each (variant, shape) ended (see :mod:`torch_nsight.formats`)."""

    name = "sweep"

    def accepts(self, path: Path) -> bool:
        """Folders holding a sweep manifest."""
        return formats.is_sweep_dir(path)

    def read(self, path: Path, options: ReadOptions) -> SourceData:
        """Read the manifest and every report it names."""
        try:
            manifest = formats.read_tagged(path / formats.SWEEP_MANIFEST, formats.SWEEP_KIND,
                                           formats.SWEEP_FORMAT)
        except formats.FormatError as err:
            raise ReportError(f"{err}: the sweep directory {path} cannot be read") from err
        record = SweepRecord.from_dict(manifest.get("record") or {})
        frames, sources = [], []
        missing: list[str] = []
        outside: list[str] = []
        for child in manifest.get("children", []):
            report = child.get("report")
            if report and not _stays_inside(path, str(report)):
                outside.append(str(report))  # a manifest names files in its folder only
                continue
            if report and not (path / report).is_file() and (path / f"{report}.xz").is_file():
                report = f"{report}.xz"  # compressed after the sweep (as tests/data keeps it)
            if not report:
                continue
            if not (path / report).is_file():
                missing.append(f"{child.get('name')} ({report})")
                continue
            frame, meta = read_report(path / report, cache=options.cache,
                                      cache_dir=options.cache_dir)
            frame = attribute_compiled(frame, path / report)
            frames.append(frame)
            sources.append(dataclasses.replace(report_source(path / report, self.name, frame,
                                                             meta), note=None))
        if outside:
            logger.warning("%s: ignoring report path(s) outside the directory: %s",
                           path / formats.SWEEP_MANIFEST, ", ".join(outside[:3]))
        if not frames and not record.dry_run:
            raise ReportError(f"the sweep directory {path} holds no readable report: every "
                              "child failed (see sweep.json and the *.log files there)"
                              + (f"; its manifest names reports outside it, which are not "
                                 f"read ({', '.join(outside[:3])})" if outside else ""))
        if missing:
            note = (f"the report of child {', '.join(missing)} is missing from {path}: the "
                    "shapes it ran have no rows")
            sources = [dataclasses.replace(s, note=note) for s in sources] or sources
        kernels = (pd.concat(frames, ignore_index=True) if frames
                   else empty_raw_table())
        timeline = None
        if record.options.get("focus") is not None:  # the timeline's rows for the rest
            from torch_nsight.report.focus import TIMELINE_FOLDER, stand_in_rows

            extra, timeline = stand_in_rows(kernels, path / TIMELINE_FOLDER,
                                            record.options.get("focused_kernels") or (),
                                            manifest.get("replication") or ())
            kernels = pd.concat([kernels.assign(deep_profiled=True), extra],
                                ignore_index=True)
        calls = calls_frame(manifest.get("calls") or [], str(path.resolve()))
        return SourceData(kernels, sources or [Source(path=str(path.resolve()), kind=self.name)],
                          replication=list(manifest.get("replication") or []), calls=calls,
                          sweeps=[record], settings=dict(manifest.get("settings") or {}),
                          timeline=timeline)


def _stays_inside(folder: Path, name: str) -> bool:
    """Whether ``name`` (from a manifest) names a file inside ``folder``: no absolute path,
    no ``..`` out of it, no link leading elsewhere."""
    if not name or Path(name).is_absolute():
        return False
    root = folder.resolve()
    return (root / name).resolve().is_relative_to(root)


def _trace_source(path: Path, kind: str, frame: pd.DataFrame, gpu: str | None) -> Source:
    from torch_nsight.report.trace import GRAPH_REPLAY

    in_module = frame["range_stack"].map(
        lambda stack: any(naming.parse_message(m).kind == "module" for m in stack))
    note = None if in_module.any() or frame.empty else (
        "none of its GPU activity ran inside a torch_nsight range: record it with "
        "torch_nsight.timeline(), or instrument the model with "
        "instrument(model, emitter=RecordFunctionEmitter()) inside torch.profiler")
    replayed = (~in_module & frame["range_other"].map(lambda o: GRAPH_REPLAY in (o or ())))
    if note is None and replayed.any():
        note = (f"{int(replayed.sum())} kernels replayed from CUDA graphs ran outside module "
                "ranges (graph: unattributed): ranges are recorded when a graph is captured, "
                "not when it replays; torch.compile(mode='reduce-overhead') graphs are "
                "attributed")
    return Source(path=str(path.resolve()), kind=kind, gpu=(gpu,) if gpu else (),
                  metric_set="timeline", has_module_ranges=bool(in_module.any()) or frame.empty,
                  note=note)


class TraceFile:
    """A Chrome trace written by PyTorch's profiler (``.json``, ``.json.gz``, ``.json.xz``):
    kernel times and the timeline, no hardware counters."""

    name = "trace"

    def accepts(self, path: Path) -> bool:
        """Files named like a trace."""
        return path.is_file() and formats.is_trace(path)

    def read(self, path: Path, options: ReadOptions) -> SourceData:
        """Parse the trace."""
        from torch_nsight.report.trace import parse_trace, read_trace_file

        frame, timeline, gpu = parse_trace(read_trace_file(path), str(path.resolve()))
        if frame.empty:
            raise ReportError(f"{path} holds no GPU activity: record the trace on a CUDA GPU "
                              "with ProfilerActivity.CUDA among the profiler's activities")
        return SourceData(frame, [_trace_source(path, self.name, frame, gpu)],
                          timeline=timeline)


class TimelineDirectory:
    """The output directory of :func:`torch_nsight.timeline`: its manifest and one trace per
    (variant, shape)."""

    name = "timeline"

    def accepts(self, path: Path) -> bool:
        """Folders holding a timeline manifest."""
        return formats.is_timeline_dir(path)

    def read(self, path: Path, options: ReadOptions) -> SourceData:
        """Read the manifest and every trace it names."""
        from torch_nsight.report.trace import parse_trace, read_trace_file

        try:
            manifest = formats.read_tagged(path / formats.TIMELINE_MANIFEST,
                                           formats.TIMELINE_KIND, formats.TIMELINE_FORMAT)
        except formats.FormatError as err:
            raise ReportError(f"{err}: the timeline directory {path} cannot be read") from err
        frames, timelines, sources = [], [], []
        for item in manifest.get("items", []):
            trace = item.get("trace")
            if not trace or not _stays_inside(path, str(trace)) or not (path / trace).is_file():
                continue
            steps = {f"{item.get('variant', '')}|{item.get('shape', '')}": item}
            frame, timeline, gpu = parse_trace(read_trace_file(path / trace),
                                               str((path / trace).resolve()), steps,
                                               measured_only=True)
            rank = _RANK_NAME.search(trace.split(".")[0])
            frame["rank"] = pd.Series([int(rank.group(1)) if rank else None] * len(frame),
                                      index=frame.index, dtype="Int64")
            frames.append(frame)
            timelines.append(timeline)
            source = _trace_source(path / trace, self.name, frame, gpu)
            if frame.empty:
                source = dataclasses.replace(source, note=(
                    f"no GPU activity: recorded on {manifest.get('device')}, the trace holds "
                    "CPU ops and step times only"))
            sources.append(source)
        failed = [f"{i.get('shape')}: {i.get('error')}" for i in manifest.get("items", [])
                  if i.get("status") == "failed"]
        if failed and sources:
            sources[-1] = dataclasses.replace(sources[-1], note="; ".join(
                filter(None, [sources[-1].note, "failed shapes: " + "; ".join(failed)])))
        if not frames:
            raise ReportError(f"the timeline directory {path} holds no trace: every shape "
                              f"failed ({'; '.join(failed) or 'see the manifest'})")
        return SourceData(pd.concat(frames, ignore_index=True), sources,
                          settings=dict(manifest.get("settings") or {}),
                          timeline=pd.concat(timelines, ignore_index=True))


def empty_raw_table() -> pd.DataFrame:
    """A raw kernel table with no rows."""
    from torch_nsight.report.table import RAW_COLUMNS

    return pd.DataFrame({c: pd.Series(dtype=object) for c in RAW_COLUMNS})


READERS: list[SourceReader] = [SweepDirectory(), TimelineDirectory(), SavedProfile(),
                               NcuReport(), TraceFile()]


def register_reader(reader: SourceReader, *, first: bool = True) -> None:
    """Add a source reader (tried before the built-in ones unless ``first`` is False)."""
    if first:
        READERS.insert(0, reader)
    else:
        READERS.append(reader)


def _holds_trace_events(path: Path, window: int = 1 << 20) -> bool:
    """Whether the first MiB of a JSON file (plain, gzip or xz) names ``traceEvents``."""
    import lzma

    from torch_nsight.report.trace import trace_opener

    try:
        with trace_opener(path)(path, "rb") as handle:
            return b'"traceEvents"' in handle.read(window)
    except (OSError, EOFError, lzma.LZMAError):
        return True  # damaged: let its reader say so


def expand_paths(paths: Sequence[Path]) -> list[Path]:
    """Replace each folder that is not a sweep directory by the reports and saved profiles
    directly inside it.

    Raises:
        ReportError: such a folder holds none.
    """
    out: list[Path] = []
    for path in paths:
        if not path.is_dir() or formats.is_sweep_dir(path) or formats.is_timeline_dir(path):
            out.append(path)
            continue
        files = sorted(p for p in path.iterdir() if p.is_file()
                       and (is_report(p) or SavedProfile().accepts(p) or formats.is_trace(p)))
        strays = [p for p in files if formats.is_trace(p) and not _holds_trace_events(p)]
        if strays:  # a config.json beside the reports is not a trace to fail on
            logger.warning("%s: skipping JSON file(s) that are not traces: %s", path,
                           ", ".join(p.name for p in strays[:5]))
            files = [p for p in files if p not in strays]
        if not files:
            raise ReportError(f"the folder {path} holds no .ncu-rep report, saved profile "
                              f"(.parquet) or sweep manifest ({formats.SWEEP_MANIFEST})")
        out.extend(files)
    return out


#: The first bytes of each kind of file a reader takes, and the name it should end in.
_MAGIC = ((b"NVR\0", "an Nsight Compute report", (".ncu-rep",)),
          (b"\xfd7zXZ\0", "xz-compressed", (".ncu-rep.xz", ".json.xz")),
          (b"PAR1", "a Parquet file", (".parquet",)),
          (b"\x1f\x8b", "gzip-compressed", (".json.gz",)))


def _misnamed(path: Path) -> str | None:
    """What a file that its name's reader refused really looks like, if its first bytes
    say so and its name does not end that way."""
    if not path.is_file():
        return None
    try:
        with open(path, "rb") as file:
            head = file.read(8)
    except OSError:
        return None
    for magic, what, suffixes in _MAGIC:
        if head.startswith(magic) and not path.name.endswith(suffixes):
            return f"its content is {what}: rename it to end in {' or '.join(suffixes)}"
    return None


def read_source(path: Path, options: ReadOptions) -> SourceData:
    """Read one file or folder with the first reader that accepts it.

    Raises:
        ReportError: it does not exist, or no reader accepts it, or its reader failed.
    """
    if not path.exists():
        raise ReportError(f"{path} does not exist: pass an Nsight Compute report "
                          "(.ncu-rep, .ncu-rep.xz), a saved profile (.parquet), a sweep's or "
                          "timeline's output directory, or a PyTorch profiler trace (.json)")
    for reader in READERS:
        if reader.accepts(path):
            logger.debug("reading %s as %s", path, reader.name)
            try:
                return reader.read(path, options)
            except ReportError as err:
                hint = _misnamed(path)
                if hint is None:
                    raise
                raise type(err)(f"{err}; {hint}") from err  # the same kind of error
    raise ReportError(f"{path} is not a source torch_nsight reads: pass an Nsight Compute "
                      "report (.ncu-rep, .ncu-rep.xz), a saved profile (.parquet), a "
                      "sweep's or timeline's output directory, or a PyTorch profiler trace "
                      "(.json, .json.gz)")
