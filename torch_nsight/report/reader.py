"""Open ``.ncu-rep`` files with NVIDIA's ``ncu_report`` and read one flat record per kernel.

A compressed report is decompressed to a temporary file (refused once it passes the cap
of :mod:`~torch_nsight.report.expand`), a damaged or empty one refused in one line; each kernel becomes the record :func:`~torch_nsight.report.kernel_record.read_action`
makes. Large reports are read by several processes at once, forked from this one with the
report it opened. No pandas here: records are plain dicts.
"""

from __future__ import annotations

import contextlib
import logging
import lzma
import multiprocessing
import multiprocessing.connection
import os
import re
import sys
import tempfile
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

from torch_nsight.errors import ReportError
from torch_nsight.files import free_space, is_full
from torch_nsight.report.expand import expand_into
from torch_nsight.report.kernel_record import read_action
from torch_nsight.report.ncu_import import import_reader

logger = logging.getLogger(__name__)

# Reports this large are read by short-lived worker processes (see read_records).
IN_PROCESS_MAX_KERNELS = 200
CHUNK_KERNELS = 1000

_VERSION_RE = re.compile(rb"(\d{4}\.\d+\.\d+)(?:\.\d+)? \(build \d+\)")
_VERSION_SCAN_BYTES = 4 << 20


@contextlib.contextmanager
def local_report(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a readable ``.ncu-rep`` path for ``path``, decompressing ``.xz`` to a temp file.

    Args:
        path: a ``.ncu-rep`` or ``.ncu-rep.xz`` file.

    Yields:
        The path to hand to ``ncu_report.load_report``; a temporary file is removed after.

    Raises:
        ReportError: the file does not exist or is not a regular file, is not valid xz, or
            expands past the cap (:func:`~torch_nsight.report.expand.expansion_limit`).
    """
    source = Path(path)
    if not source.is_file():
        what = "is not a regular file" if source.exists() else "does not exist"
        raise ReportError(f"report {source} {what}: pass the path of a file written by "
                          "`ncu -o` (a .ncu-rep or .ncu-rep.xz)")
    if source.suffix != ".xz":
        with _named_in_utf8(source) as named:
            yield named
        return
    handle, name = tempfile.mkstemp(suffix=".ncu-rep", prefix="torch_nsight-")
    try:
        with os.fdopen(handle, "wb") as out:
            expand_into(source, out)  # refused past the cap, before the disk fills
    except BaseException as err:
        os.unlink(name)  # nothing left behind, whatever stopped it
        if isinstance(err, (lzma.LZMAError, EOFError)):
            raise ReportError(f"{source} is not a valid xz file ({err}): decompress it with "
                              "`xz -d` to check, or pass the uncompressed .ncu-rep") from err
        if isinstance(err, OSError) and is_full(err):
            folder = Path(name).parent
            raise ReportError(f"cannot decompress {source} into {folder}: {err.strerror} "
                              f"({free_space(folder)}): set TMPDIR to a folder with room, or "
                              "pass the uncompressed .ncu-rep") from err
        raise
    try:
        yield Path(name)
    finally:
        with contextlib.suppress(OSError):
            os.unlink(name)


@contextlib.contextmanager
def _named_in_utf8(source: Path) -> Iterator[Path]:
    """``source``, or a link to it named in UTF-8 where its own path is not (Nsight's reader
    opens no other name), removed after."""
    try:
        str(source).encode()
    except UnicodeEncodeError:
        pass
    else:
        yield source
        return
    folder = Path(tempfile.mkdtemp(prefix="torch_nsight-"))
    link = folder / "report.ncu-rep"
    try:
        link.symlink_to(source.absolute())
        yield link
    finally:
        with contextlib.suppress(OSError):
            link.unlink()
        with contextlib.suppress(OSError):
            folder.rmdir()


#: The first bytes of every Nsight Compute report.
REPORT_MAGIC = b"NVR\0"


def _damaged(shown: str | os.PathLike[str], what: str) -> ReportError:
    return ReportError(f"{shown} is a damaged Nsight Compute report (cut short while ncu wrote "
                       f"it or while it was copied?): {what}; record it again or copy it again")


def open_context(local: Path, shown: str | os.PathLike[str]) -> Any:
    """Load a report with ``ncu_report`` and check that it holds kernels.

    Args:
        local: the uncompressed report on disk.
        shown: the path to name in error messages (the user's path).

    Returns:
        The ``ncu_report`` context.

    Raises:
        ReportError: the reader cannot open it, or it holds no profiled kernel.
    """
    ncu_report = import_reader()
    try:
        context = ncu_report.load_report(str(local))
    except Exception as err:  # the reader raises assorted types for unreadable files
        raise ReportError(f"Nsight Compute's reader could not open {shown}: {err}") from err
    if context.num_ranges() == 0:
        with open(local, "rb") as head:
            damaged = head.read(len(REPORT_MAGIC)) == REPORT_MAGIC
        if damaged:
            raise _damaged(shown, "the reader found no complete kernel in it")
        raise ReportError(f"{shown} is not an Nsight Compute report (the reader found no "
                          "ranges in it): pass a file written by `ncu -o NAME`")
    if sum(context.range_by_idx(i).num_actions() for i in range(context.num_ranges())) == 0:
        raise ReportError(f"{shown} holds no profiled kernel: check the ncu log for "
                          "'No kernels were profiled' and the --nvtx-include filter")
    return context


def writer_version(local: Path) -> str | None:
    """Return the Nsight Compute version that wrote the report (from its header), if found."""
    with open(local, "rb") as handle:
        match = _VERSION_RE.search(handle.read(_VERSION_SCAN_BYTES))
    return match.group(1).decode() if match else None


def _positions(context: Any) -> list[tuple[int, int]]:
    return [(r, a) for r in range(context.num_ranges())
            for a in range(context.range_by_idx(r).num_actions())]


def read_positions(context: Any, positions: list[tuple[int, int]]) -> list[dict[str, Any]]:
    """Return the records of the kernels at ``positions`` ((range, kernel) pairs) of a report."""
    ranges: dict[int, Any] = {}
    records = []
    for r, a in positions:
        if r not in ranges:
            ranges[r] = context.range_by_idx(r)
        record = read_action(ranges[r].action_by_idx(a), r, a)
        if record is not None:
            records.append(record)
    return records


def _read_chunk_into(context: Any, positions: list[tuple[int, int]], sender: Any) -> None:
    """A forked worker: read ``positions`` of the report inherited from its parent (never
    pickled) and send the records back."""
    try:
        sender.send(read_positions(context, positions))
    finally:
        sender.close()


def _usable_cpus() -> int:
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0)) or 1
    return os.cpu_count() or 1


def _fork_context() -> multiprocessing.context.ForkContext | None:
    if sys.platform != "linux":
        return None
    return multiprocessing.get_context("fork")


def read_records(context: Any, local: Path, *, workers: int | None = None) -> list[dict[str, Any]]:
    """Return one record per kernel of an open report, in report order.

    ``ncu_report`` keeps the memory of every kernel record it opens until the process ends
    (about 0.4-0.6 MB per kernel with the SpeedOfLight section). Reports of
    :data:`IN_PROCESS_MAX_KERNELS` kernels or more are therefore read by short-lived worker
    processes, :data:`CHUNK_KERNELS` kernels each, as many at once as there are usable CPUs.
    The workers are forked from this process and use the report it already opened and warmed
    up (the reader's first kernel costs about 60 ms), instead of opening it again each.

    Args:
        context: the report opened by :func:`open_context`.
        local: its uncompressed path (named in log messages).
        workers: processes to use at once; default one per usable CPU. 0 reads in this
            process whatever the size.

    Returns:
        The records, as :func:`~torch_nsight.report.kernel_record.read_action` makes them.
    """
    positions = _positions(context)
    if workers == 0 or _fork_context() is None or len(positions) < IN_PROCESS_MAX_KERNELS:
        records = read_positions(context, positions)
    else:
        logger.debug("reading the %d kernels of %s in worker processes", len(positions), local)
        records = read_in_workers(context, positions, workers or _usable_cpus())
    if positions and not records:
        raise _damaged(local.name, f"none of its {len(positions)} kernel records is complete")
    return records


def left_out(context: Any, records: list[dict[str, Any]], shown: str) -> str | None:
    """What a damaged report's reading left out, in one sentence naming ``shown`` (the file
    the user gave); None when every kernel record was complete."""
    total = len(_positions(context))
    if len(records) >= total:
        return None
    return (f"{shown} is damaged (cut short?): {total - len(records)} of its {total} kernel "
            "records are incomplete and left out")


def read_in_workers(context: Any, positions: list[tuple[int, int]],
                    workers: int) -> list[dict[str, Any]]:
    """Read the kernels at ``positions`` in forked worker processes, in order.

    Args:
        context: an open report (see :func:`read_records`).
        positions: (range, kernel) pairs to read.
        workers: processes to run at once (fewer when there are fewer chunks).

    Returns:
        The records, in the order of ``positions``; read in this process where ``fork``
        is not available.
    """
    fork = _fork_context()
    if fork is None or not positions:
        return read_positions(context, positions)
    chunks = [(start, min(start + CHUNK_KERNELS, len(positions)))
              for start in range(0, len(positions), CHUNK_KERNELS)]
    workers = max(1, min(workers, len(chunks)))
    logger.debug("reading %d kernels in %d chunks, %d processes at once",
                 len(positions), len(chunks), workers)
    first_range, first_kernel = positions[0]
    context.range_by_idx(first_range).action_by_idx(first_kernel)  # the reader's warm-up
    parts: dict[int, list[dict[str, Any]]] = {}
    pending = list(range(len(chunks)))
    running: dict[Any, tuple[int, Any]] = {}  # receiving end -> (chunk, process)
    crashed = False
    with warnings.catch_warnings():
        # pandas' import leaves allocator threads behind; the children touch only ncu_report.
        warnings.filterwarnings("ignore", message=r".*multi-threaded.*fork",
                                category=DeprecationWarning)
        while running or (pending and not crashed):
            while pending and len(running) < workers and not crashed:
                chunk = pending.pop(0)
                receiver, sender = fork.Pipe(duplex=False)
                start, stop = chunks[chunk]
                process = fork.Process(target=_read_chunk_into, daemon=True,
                                       args=(context, positions[start:stop], sender))
                process.start()
                sender.close()
                running[receiver] = (chunk, process)
            # wait() returns those of the receiving ends given it that are ready
            ready = multiprocessing.connection.wait(list(running))
            for receiver in cast("list[multiprocessing.connection.Connection]", ready):
                chunk, process = running.pop(receiver)
                try:
                    parts[chunk] = receiver.recv()
                except Exception:  # noqa: BLE001 - it died (the reader crashed in it)
                    crashed = True
                receiver.close()
                process.join()
                if chunk not in parts:
                    logger.warning("a process reading the report died (exit status %s); "
                                   "reading its kernels and the rest in this process",
                                   process.exitcode)
    for chunk in range(len(chunks)):
        if chunk not in parts:
            start, stop = chunks[chunk]
            parts[chunk] = read_positions(context, positions[start:stop])
    return [record for chunk in range(len(chunks)) for record in parts[chunk]]
