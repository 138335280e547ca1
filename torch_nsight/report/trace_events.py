"""The events of a Chrome trace, read and checked before :mod:`torch_nsight.report.trace`
uses them.

Reading. msgspec decodes the file's bytes into small typed records that hold only the
fields the reader uses (``ph``, ``cat``, ``name``, ``tid``, ``ts``, ``dur`` and seven
``args`` fields); every other field is skipped without becoming a Python object. What
msgspec does not take (JSON extensions that Python's ``json`` accepts, such as ``NaN`` or
a lone surrogate, and damage) is read again by ``json``, which gives the values and
errors it always gave. Then one pass files each event by what the reader asks of it
(:class:`TraceEvents`), so neither the event list nor a table of it outlives the pass.

Checking. A trace is JSON anyone can edit or damage: an event whose times are not finite,
non-negative numbers, or whose ``args`` is not an object, is left out with one counted
warning per trace ("3 kernel events with invalid durations left out"); fields a reader
takes from ``args`` (correlation, device, stream, bytes, grid, block, registers) keep their
value only when it has the right type. Times are in ns from here on (``ts * 1000.0``).
"""

from __future__ import annotations

import codecs
import gzip
import json
import lzma
import zlib
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import msgspec

from torch_nsight import formats, naming
from torch_nsight.checks import DAMAGED, LeftOut, number, whole
from torch_nsight.errors import ReportError

GPU_CATEGORIES = {"kernel": "kernel", "gpu_memcpy": "memcpy", "gpu_memset": "memset"}
CALL_CATEGORIES = ("cuda_runtime", "cuda_driver")
CPU_CATEGORIES = ("cpu_op", "user_annotation", "python_function")
#: µs; beyond 1e17 (3,000 years) a time is damage, not a measurement.
_LATEST = 1e17


class _Args(msgspec.Struct):
    """The ``args`` fields a reader takes, unchecked."""

    correlation: Any = None
    device: Any = None
    stream: Any = None
    bytes: Any = None
    grid: Any = None
    block: Any = None
    registers: Any = msgspec.field(default=None, name="registers per thread")


_NO_ARGS = _Args()


class _Event(msgspec.Struct):
    """The fields of one event a reader takes, unchecked."""

    ph: Any = None
    cat: Any = None
    name: Any = None
    tid: Any = None
    ts: Any = None
    dur: Any = None
    args: _Args | list[Any] | str | float | int | bool | None = None


#: An item of ``traceEvents``: an event, or a value that is no object (skipped).
_Items = list[_Event | list[Any] | str | float | int | bool | None]


class _Trace(msgspec.Struct):
    traceEvents: _Items | None = None
    deviceProperties: Any = None


_DECODER = msgspec.json.Decoder(_Trace)


class Span(NamedTuple):
    """A CPU event: ns, its name as recorded."""

    start: float
    end: float
    name: str


class Call(NamedTuple):
    """A CUDA runtime or driver call."""

    start: float
    end: float
    name: str
    tid: int | str | None


class Activity(NamedTuple):
    """A GPU activity with its checked ``args`` (None where missing or invalid)."""

    kind: str
    name: str
    start: float
    duration: float
    correlation: int | None
    device: int
    stream: int | None
    bytes: float | None
    grid: list[int] | None
    block: list[int] | None
    registers: int | None


@dataclass
class TraceEvents:
    """A trace's complete (``ph: X``) events with valid times, by what the reader asks.

    Attributes:
        activities: GPU activity, in file order.
        calls: CUDA calls by correlation id (the last one where several share it).
        ranges: events named with :data:`~torch_nsight.naming.RECORD_PREFIX`
            (``user_annotation`` or ``cpu_op``), in file order, with their thread.
        annotations: other ``user_annotation`` events, per thread in file order.
        cpu: CPU ops, annotations and CUDA calls not named with the prefix, per thread.
        origin: the earliest start (ns), 0.0 when none.
        gpus: GPU names by device id (``deviceProperties``).
    """

    activities: list[Activity] = field(default_factory=list)
    calls: dict[int, Call] = field(default_factory=dict)
    ranges: list[tuple[Span, int | str | None]] = field(default_factory=list)
    annotations: dict[Any, list[Span]] = field(default_factory=lambda: defaultdict(list))
    cpu: dict[Any, list[Span]] = field(default_factory=lambda: defaultdict(list))
    origin: float = 0.0
    gpus: dict[int, str] = field(default_factory=dict)


def trace_opener(path: Path) -> Any:
    """The ``open`` for a trace file: gzip's, xz's or the plain one, by its suffix."""
    return {".gz": gzip.open, ".xz": lzma.open}.get(path.suffix, open)


def read_trace(path: Path, where: str | None = None, *, fast: bool = True) -> TraceEvents:
    """Read and check the events of a Chrome trace (``.json``, ``.json.gz``, ``.json.xz``).

    Args:
        path: the trace file.
        where: its name in the warning (default: ``path``).
        fast: decode with msgspec (False: with ``json`` alone, as a reference).

    Returns:
        The events; one warning logged when some were left out.

    Raises:
        ReportError: it is not a readable trace of PyTorch's profiler.
    """
    try:
        with trace_opener(path)(path, "rb") as handle:
            data = handle.read()
    except FileNotFoundError:
        raise ReportError(f"{path} does not exist") from None
    except (OSError, EOFError, lzma.LZMAError, zlib.error) as err:
        raise _unreadable(path, err) from err
    trace = _decode_fast(data) if fast else None
    if trace is None:
        trace = _decode_reference(data, path)
    items, devices = trace.traceEvents, trace.deviceProperties
    del trace, data
    return sort_events(items or [], devices, where or str(path))


def _unreadable(path: Path, err: BaseException) -> ReportError:
    return ReportError(f"{path} is not a readable Chrome trace ({err}): pass a trace "
                       "written by torch.profiler (export_chrome_trace)")


def _decode_fast(data: bytes) -> _Trace | None:
    """The trace decoded by msgspec, or None where it takes the JSON only with ``json``'s
    extensions, or not at all (then :func:`_decode_reference` says why)."""
    if not data.isascii() and not _is_utf8(data):
        return None
    try:
        trace = _DECODER.decode(data)
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
        return None
    return trace if trace.traceEvents is not None else None


def _is_utf8(data: bytes, chunk: int = 1 << 24) -> bool:
    """Whether ``data`` is UTF-8 (checked a chunk at a time: no copy of it all)."""
    decoder = codecs.getincrementaldecoder("utf-8")()
    view = memoryview(data)
    try:
        for offset in range(0, len(data), chunk):
            decoder.decode(view[offset:offset + chunk], final=offset + chunk >= len(data))
    except UnicodeDecodeError:
        return False
    return True


def _decode_reference(data: bytes, path: Path) -> _Trace:
    """The trace decoded by ``json``, with the library's errors for what it refuses."""
    try:
        document = json.loads(data.decode("utf-8"))
    except RecursionError:
        raise ReportError(f"{path} is not a readable Chrome trace: its JSON is nested too "
                          f"deeply; {DAMAGED}") from None
    except ValueError as err:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise _unreadable(path, err) from err
    if not isinstance(document, dict) or not isinstance(document.get("traceEvents"), list):
        raise ReportError(f"{path} is JSON but not a Chrome trace (no traceEvents list): pass "
                          "a trace written by torch.profiler (export_chrome_trace)")
    return _Trace(msgspec.convert(document["traceEvents"], _Items),
                  document.get("deviceProperties"))


def _time(value: Any) -> float | None:
    """A valid ``ts`` or ``dur`` in µs, or None."""
    if type(value) is float and 0.0 <= value <= _LATEST:
        return value
    return number(value, maximum=_LATEST)


def _dims(value: Any) -> list[int] | None:
    if isinstance(value, list) and len(value) == 3 and all(whole(d) is not None
                                                           for d in value):
        return [whole(d) for d in value]  # type: ignore[misc]
    return None


def _activity(kind: str, name: str, start: float, duration: float, args: _Args) -> Activity:
    return Activity(kind, name, start, duration, whole(args.correlation),
                    d if (d := whole(args.device)) is not None else 0, whole(args.stream),
                    number(args.bytes), _dims(args.grid), _dims(args.block),
                    whole(args.registers))


def sort_events(items: Iterable[Any], devices: Any, where: str) -> TraceEvents:
    """File the complete events of a trace with valid fields by what the reader asks.

    Args:
        items: the decoded ``traceEvents`` (values that are not events are skipped).
        devices: the decoded ``deviceProperties``.
        where: the trace's path, for the warning.
    """
    left = LeftOut(where)
    out = TraceEvents()
    names: dict[str, str] = {}  # one str per distinct name
    origin = float("inf")
    prefix = naming.RECORD_PREFIX
    for item in items:
        if type(item) is not _Event or item.ph != "X":
            continue
        cat = item.cat if type(item.cat) is str else None
        start, duration = _time(item.ts), _time(item.dur)
        if start is None or duration is None:
            left.add(GPU_CATEGORIES.get(cat or "", "CPU"),
                     "invalid start times" if start is None else "invalid durations")
            continue
        args = item.args
        if type(args) is not _Args:
            if args is not None:
                left.add(GPU_CATEGORIES.get(cat or "", "CPU"), "args that are not an object")
                continue
            args = _NO_ARGS
        name = item.name if type(item.name) is str else str(item.name or "")
        name = names.setdefault(name, name)
        tid = item.tid if isinstance(item.tid, (int, str)) and type(item.tid) is not bool \
            else None
        start, duration = start * 1000.0, duration * 1000.0
        origin = min(origin, start)
        kind = GPU_CATEGORIES.get(cat) if cat is not None else None
        if kind is not None:
            out.activities.append(_activity(kind, name, start, duration, args))
            continue
        span = Span(start, start + duration, name)
        ours = name.startswith(prefix)
        if cat in CALL_CATEGORIES:
            correlation = whole(args.correlation)
            if correlation is not None:
                out.calls[correlation] = Call(*span, tid)
        if ours:
            if cat in ("user_annotation", "cpu_op"):
                out.ranges.append((span, tid))
            continue
        if cat == "user_annotation":
            out.annotations[tid].append(span)
        if cat in CPU_CATEGORIES or cat in CALL_CATEGORIES:
            out.cpu[tid].append(span)
    left.warn()
    out.origin = origin if origin != float("inf") else 0.0
    for index, device in enumerate(devices if isinstance(devices, list) else []):
        if isinstance(device, dict):
            device_id = whole(device.get("id", index))
            if device_id is not None:
                out.gpus[device_id] = str(device.get("name"))
    return out


def is_compiled_map(name: str) -> bool:
    """Whether a range's name carries a compiled graph's map."""
    return name.startswith(naming.RECORD_PREFIX + formats.COMPILED_MAP_PREFIX)
