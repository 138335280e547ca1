"""The events of a Chrome trace, read and checked before :mod:`torch_nsight.report.trace`
uses them.

Reading. msgspec decodes the file's bytes into small typed records that hold only the
fields the reader uses (``ph``, ``cat``, ``name``, ``tid``, ``ts``, ``dur`` and seven
``args`` fields); every other field is skipped without becoming a Python object. A file
msgspec does not take (a field read holding an unusual type, JSON extensions that
Python's ``json`` accepts such as ``NaN`` or a lone surrogate, damage) is read again by
``json``, which gives the values and errors it always gave. Then one pass files each
event by what the reader asks of it (:class:`TraceEvents`), dropping each decoded record
once filed, so the records, the file's bytes and the tables are never all held at once.

Checking. A trace is JSON anyone can edit or damage: an event whose times are not finite,
non-negative numbers, or whose ``args`` is not an object, is left out with one counted
warning per trace ("3 kernel events with invalid durations left out"); fields a reader
takes from ``args`` (correlation, device, stream, bytes, grid, block, registers) keep their
value only when it has the right type. Times are in ns from here on (``ts * 1000.0``).
"""

from __future__ import annotations

import codecs
import contextlib
import gc
import json
import logging
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import msgspec

from torch_nsight import formats, naming
from torch_nsight.checks import DAMAGED, LeftOut, number, whole
from torch_nsight.errors import ReportError
from torch_nsight.report.expand import EXPANSION_ERRORS, read_expanded

logger = logging.getLogger(__name__)

GPU_CATEGORIES = {"kernel": "kernel", "gpu_memcpy": "memcpy", "gpu_memset": "memset"}
CALL_CATEGORIES = ("cuda_runtime", "cuda_driver")
CPU_CATEGORIES = ("cpu_op", "user_annotation", "python_function")
_CPU_OR_CALL = frozenset((*CPU_CATEGORIES, *CALL_CATEGORIES))
_KINDS: dict[str | None, str] = {cat: kind for cat, kind in GPU_CATEGORIES.items()}
_THREAD_TYPES = (int, str)  # a bool is no thread id
#: µs; beyond 1e17 (3,000 years) a time is damage, not a measurement.
_LATEST = 1e17


class _Args(msgspec.Struct, gc=False):
    """The ``args`` fields a reader takes."""

    correlation: int | None = None
    device: int | None = None
    stream: int | None = None
    bytes: float | None = None
    grid: list[int] | None = None
    block: list[int] | None = None
    registers: int | None = msgspec.field(default=None, name="registers per thread")


_NO_ARGS = _Args()


class _Event(msgspec.Struct, gc=False):
    """The fields of one event a reader takes, typed as a well-formed trace holds them.

    Untracked by the garbage collector (``gc=False``: they hold no cycles), which makes
    decoding a million of them several times quicker. The types hold for the fast path
    only: :func:`_decode_reference` fills the records
    with whatever the file holds (a Struct does not check its values when built), and
    :func:`sort_events` checks every value.
    """

    ph: str | None = None
    cat: str | None = None
    name: str | None = None
    tid: int | str | None = None
    ts: float | None = None
    dur: float | None = None
    args: _Args | None = None


class _Trace(msgspec.Struct):
    traceEvents: list[_Event]
    deviceProperties: Any = None


_DECODER = msgspec.json.Decoder(_Trace)


#: A CPU event: start and end (ns), its name as recorded.
Span = tuple[float, float, str]


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
    grid: tuple[int, int, int] | None
    block: tuple[int, int, int] | None
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
        ops: ``cpu_op`` events not named with the prefix (PyTorch's ops), per thread in
            file order.
        cpu: CPU ops, annotations and CUDA calls not named with the prefix, per thread.
        origin: the earliest start (ns), 0.0 when none.
        gpus: GPU names by device id (``deviceProperties``).
    """

    activities: list[Activity] = field(default_factory=list)
    calls: dict[int, Call] = field(default_factory=dict)
    ranges: list[tuple[Span, int | str | None]] = field(default_factory=list)
    annotations: dict[Any, list[Span]] = field(default_factory=lambda: defaultdict(list))
    ops: dict[Any, list[Span]] = field(default_factory=lambda: defaultdict(list))
    cpu: dict[Any, list[Span]] = field(default_factory=lambda: defaultdict(list))
    origin: float = 0.0
    gpus: dict[int, str] = field(default_factory=dict)




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
        data = read_expanded(path, where)  # a bomb refused before it fills the memory
    except FileNotFoundError:
        raise ReportError(f"{path} does not exist") from None
    except EXPANSION_ERRORS as err:
        raise _unreadable(path, err) from err
    with collector_paused():
        trace = _decode_fast(data) if fast else None
        if trace is None:
            trace = _decode_reference(data, path)
        items, devices = trace.traceEvents, trace.deviceProperties
        del trace, data
        return sort_events(_consumed(items), devices, where or str(path))


def _consumed(items: list[Any]) -> Iterator[Any]:
    """The items in order, each dropped from the list as it is handed out: what is kept of
    the events grows as the decoded records go, never beside all of them."""
    items.reverse()
    while items:
        yield items.pop()


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector paused: building a million small objects (none
    in a cycle) would run it hundreds of times over all of them, doubling the time.
    Reading a trace and parsing it (:func:`~torch_nsight.report.trace.parse_trace`) both
    run under it."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _unreadable(path: Path, err: BaseException) -> ReportError:
    return ReportError(f"{path} is not a readable Chrome trace ({err}): pass a trace "
                       "written by torch.profiler (export_chrome_trace)")


def _decode_fast(data: bytes) -> _Trace | None:
    """The trace decoded by msgspec, or None where a field it reads holds an unusual type
    (the reference path checks it), the JSON uses ``json``'s extensions (``NaN``), or it
    is no trace at all (the reference path says why)."""
    if not data.isascii() and not _is_utf8(data):
        return None
    try:
        return _DECODER.decode(data)
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError) as err:
        logger.debug("reading the trace with json: msgspec did not take it (%s)", err)
        return None


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
    return _Trace([_event(item) for item in document["traceEvents"]],
                  document.get("deviceProperties"))


def _event(item: Any) -> Any:
    """An item of ``traceEvents`` as :func:`sort_events` takes it, values unchecked."""
    if not isinstance(item, dict):
        return item  # skipped
    args = item.get("args")
    if isinstance(args, dict):
        args = _Args(**{name: args.get(key) for name, key in _ARGS_KEYS})
    return _Event(item.get("ph"), item.get("cat"), item.get("name"), item.get("tid"),
                  item.get("ts"), item.get("dur"), args)


#: ``_Args``'s fields and the keys they are read from.
_ARGS_KEYS = tuple((f.name, f.encode_name) for f in msgspec.structs.fields(_Args))


_LARGEST_WHOLE = 2**63 - 1


def _whole(value: Any) -> int | None:
    """:func:`~torch_nsight.checks.whole`, quicker for the usual value."""
    if type(value) is int and 0 <= value <= _LARGEST_WHOLE:
        return value
    return whole(value)


def _dims(value: Any) -> tuple[int, int, int] | None:
    if type(value) is not list or len(value) != 3:
        return None
    x, y, z = value
    if type(x) is int and type(y) is int and type(z) is int \
            and 0 <= x <= _LARGEST_WHOLE and 0 <= y <= _LARGEST_WHOLE and 0 <= z <= _LARGEST_WHOLE:
        return x, y, z  # the usual value, as _whole takes each
    dims = tuple(_whole(d) for d in value)
    return None if None in dims else dims  # type: ignore[return-value]


def _activity(kind: str, name: str, start: float, duration: float, args: _Args) -> Activity:
    # the usual values (whole numbers in range, or None) taken as they are, without a call
    # each; whole() and number() decide the others
    correlation, device, stream, registers = (args.correlation, args.device, args.stream,
                                              args.registers)
    if type(correlation) is not int or not 0 <= correlation <= _LARGEST_WHOLE:
        correlation = whole(correlation)
    if type(device) is not int or not 0 <= device <= _LARGEST_WHOLE:
        device = whole(device)
    if type(stream) is not int or not 0 <= stream <= _LARGEST_WHOLE:
        stream = whole(stream)
    if type(registers) is not int or not 0 <= registers <= _LARGEST_WHOLE:
        registers = whole(registers)
    size = args.bytes
    return Activity(kind, name, start, duration, correlation,
                    device if device is not None else 0, stream,
                    number(size) if size is not None else None, _dims(args.grid),
                    _dims(args.block), registers)


def sort_events(items: Iterable[Any], devices: Any, where: str) -> TraceEvents:
    """File the complete events of a trace with valid fields by what the reader asks.

    Args:
        items: the decoded ``traceEvents`` (values that are not events are skipped).
        devices: the decoded ``deviceProperties``.
        where: the trace's path, for the warning.
    """
    left = LeftOut(where)
    out = TraceEvents()
    names: dict[str, str] = {}
    intern = names.setdefault  # one str per distinct name
    origin = float("inf")
    prefix = naming.RECORD_PREFIX
    activities, calls, ranges = out.activities, out.calls, out.ranges
    seen: set[tuple[float, int | None, str, int | None]] = set()  # GPU events, to find twins
    for item in items:
        if type(item) is not _Event or item.ph != "X":
            continue
        cat = item.cat if type(item.cat) is str else None
        start, duration = item.ts, item.dur
        # the usual value first; number() decides the others
        if type(start) is not float or not 0.0 <= start <= _LATEST:
            start = number(start, maximum=_LATEST)
        if type(duration) is not float or not 0.0 <= duration <= _LATEST:
            duration = number(duration, maximum=_LATEST)
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
        name = item.name
        name = intern(name, name) if type(name) is str else str(name or "")
        tid = item.tid if type(item.tid) in _THREAD_TYPES else None
        start *= 1000.0
        duration *= 1000.0
        if start < origin:
            origin = start
        kind = _KINDS.get(cat)
        if kind is not None:
            activity = _activity(kind, name, start, duration, args)
            twin = (start, activity.correlation, name, activity.stream)
            if twin in seen:  # the same event written twice: counted once
                left.add(GPU_CATEGORIES.get(cat or "", kind), "a twin earlier in the file")
                continue
            seen.add(twin)
            activities.append(activity)
            continue
        span = (start, start + duration, name)
        if cat in CALL_CATEGORIES:
            correlation = _whole(args.correlation)
            if correlation is not None:
                calls[correlation] = Call(*span, tid)
        if name.startswith(prefix):
            if cat == "user_annotation" or cat == "cpu_op":
                ranges.append((span, tid))
            continue
        if cat == "user_annotation":
            out.annotations[tid].append(span)
        elif cat == "cpu_op":
            out.ops[tid].append(span)
        if cat in _CPU_OR_CALL:
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
