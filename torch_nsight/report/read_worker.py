"""Nsight Compute reports read in a worker process that is recycled, so that reading many
of them takes memory that does not grow with their number.

NVIDIA's reader (``ncu_report.load_report``) keeps about 24 MB of every report it opens
until its process ends: a folder of 200 small reports read in one process once ran out
of memory, and a test process that loads every recorded report grew past 11 GB. So the
reader runs in one worker process (a new interpreter running :func:`main`), reused
for :data:`REPORTS_PER_WORKER` reports (starting one costs a few tenths of a second) and
replaced after them, or sooner once its resident memory passes :data:`WORKER_MAX_RSS`; the
process that asks never imports NVIDIA's reader. The worker is a new interpreter, not a
fork: it copies neither the caller's memory and threads nor re-runs its main script.

The two talk in pickles over the worker's stdin and stdout (what the reader prints goes to
the worker's stderr, which is discarded); the worker's log records travel back with each
answer and are logged here. A report the worker dies on (the reader crashed) is an error
naming it, and the next report gets a new worker. ``TORCH_NSIGHT_READ_IN_PROCESS=1`` reads
in the calling process instead (a debugger).
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import pickle
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from torch_nsight.environment import READ_IN_PROCESS_ENV
from torch_nsight.errors import ReportError
from torch_nsight.report import reader

logger = logging.getLogger(__name__)

#: Reports one worker reads before it is replaced.
REPORTS_PER_WORKER = 20
#: Resident bytes past which a worker is replaced after its report.
WORKER_MAX_RSS = 512 << 20
#: Set to ``1`` to read reports in the calling process.
IN_PROCESS_ENV = READ_IN_PROCESS_ENV


@dataclass
class ReadReport:
    """What reading one report gives: its kernel records and what the table's metadata
    needs of the reader."""

    records: list[dict[str, Any]]
    ncu_version: str | None
    reader_version: str
    ranges: int
    left_out: str | None
    worker_rss: int = 0
    worker_pid: int = field(default_factory=os.getpid)


def read_local(local: Path, shown: str, workers: int | None = None) -> ReadReport:
    """Read the uncompressed report ``local`` (``shown``: the user's path, for messages)
    in this process."""
    context = reader.open_context(local, shown)
    records = reader.read_records(context, local, workers=workers)
    return ReadReport(records=records, ncu_version=reader.writer_version(local),
                      reader_version=str(context.get_version()),
                      ranges=int(context.num_ranges()),
                      left_out=reader.left_out(context, records, Path(shown).name),
                      worker_rss=_resident_bytes())


def _worker_environment() -> dict[str, str]:
    """This environment, with the folder this package was imported from first on the
    worker's path: it imports this very package, however the caller found it."""
    home = str(Path(__file__).resolve().parents[2])
    path = os.environ.get("PYTHONPATH")
    return {**os.environ, IN_PROCESS_ENV: "1",
            "PYTHONPATH": home + (os.pathsep + path if path else "")}


def _resident_bytes() -> int:
    try:
        with open("/proc/self/statm", encoding="ascii") as file:
            return int(file.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError, AttributeError):
        return 0


class _Worker:
    """One worker process at a time, replaced after :data:`REPORTS_PER_WORKER` reports, a
    report that left it above :data:`WORKER_MAX_RSS`, or its death."""

    def __init__(self) -> None:
        self._process: subprocess.Popen[bytes] | None = None
        self._reports = 0
        self._lock = threading.Lock()
        self.started = 0  # workers started in this process (read by tests and benches)

    def read(self, local: Path, shown: str, workers: int | None) -> ReadReport:
        with self._lock:
            process = self._process or self._start()
            assert process.stdin is not None and process.stdout is not None
            try:
                pickle.dump((str(local), shown, workers), process.stdin)
                process.stdin.flush()
                status, value, records = pickle.load(process.stdout)
            except (OSError, EOFError, pickle.UnpicklingError) as err:
                code = self.stop()
                raise ReportError(f"Nsight Compute's reader crashed reading {shown} (its "
                                  f"process ended with status {code}): check the report "
                                  "with `ncu --import` and record it again") from err
            for name, level, message in records:
                logging.getLogger(name).log(level, "%s", message)
            self._reports += 1
            if (self._reports >= REPORTS_PER_WORKER
                    or (status == "ok" and value.worker_rss > WORKER_MAX_RSS)):
                logger.debug("replacing the report reader after %d reports", self._reports)
                self.stop()
            if status != "ok":
                raise value
            return value

    def _start(self) -> subprocess.Popen[bytes]:
        self._process = subprocess.Popen(
            [sys.executable, "-c", f"from {__name__} import main; main()"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL, env=_worker_environment())
        self._reports = 0
        self.started += 1
        logger.debug("started a worker process to read reports (pid %d)", self._process.pid)
        return self._process

    def stop(self) -> int | None:
        """End the worker (the next report starts another); its exit status."""
        process, self._process = self._process, None
        if process is None:
            return None
        for stream in (process.stdin, process.stdout):
            if stream is not None:
                with contextlib.suppress(OSError):  # a dead worker's pipe is broken
                    stream.close()  # the worker ends when its input does
        try:
            return process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            return process.wait()


_WORKER = _Worker()
atexit.register(_WORKER.stop)


def read_report_file(local: Path, shown: str, workers: int | None = None) -> ReadReport:
    """Read the uncompressed report ``local`` in the worker process (see the module
    docstring), or here where :data:`IN_PROCESS_ENV` is set.

    Args:
        local: the uncompressed ``.ncu-rep``.
        shown: the path the user gave, named in messages.
        workers: processes reading a large report's kernels (see
            :func:`~torch_nsight.report.reader.read_records`).

    Returns:
        The records and what the metadata needs.

    Raises:
        ReportError: the report cannot be read, or the reader crashed on it.
    """
    if os.environ.get(IN_PROCESS_ENV) == "1" or sys.executable == "":
        return read_local(local, shown, workers)
    return _WORKER.read(local, shown, workers)


def stop_worker() -> None:
    """End the worker process now (it is ended at exit anyway)."""
    _WORKER.stop()


def workers_started() -> int:
    """How many worker processes this process has started to read reports."""
    return _WORKER.started


class _Records(logging.Handler):
    """The worker's log records, sent back with its answer."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[tuple[str, int, str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append((record.name, record.levelno, record.getMessage()))


def serve(requests: IO[bytes], answers: IO[bytes]) -> None:
    """The worker's loop: read a report per request until the input ends."""
    handler = _Records()
    logging.getLogger().addHandler(handler)
    logging.getLogger().setLevel(logging.DEBUG)
    while True:
        try:
            local, shown, workers = pickle.load(requests)
        except EOFError:
            return
        try:
            answer: tuple[str, Any] = ("ok", read_local(Path(local), shown, workers))
        except Exception as err:  # noqa: BLE001 - sent back and raised there
            answer = ("error", err if _picklable(err) else ReportError(
                f"{shown}: {type(err).__name__}: {err}"))
        pickle.dump((*answer, handler.records), answers)
        answers.flush()
        handler.records = []


def _picklable(err: BaseException) -> bool:
    try:
        pickle.loads(pickle.dumps(err))
    except Exception:  # noqa: BLE001 - any failure means no
        return False
    return True


def main() -> None:
    """The worker process: answers on the real stdout; whatever else writes to file
    descriptor 1 (NVIDIA's reader) goes to stderr."""
    answers = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    serve(sys.stdin.buffer, answers)

