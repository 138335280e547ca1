"""The sources :func:`torch_nsight.load` reads: a registry of readers, all giving the same raw
table.

A reader turns a file or folder into a :class:`~torch_nsight.report.source_base.SourceData`:
the raw kernel table (:data:`~torch_nsight.report.kernel_table.RAW_COLUMNS`: names, launch shape,
metrics, and the range stack around each kernel, whatever recorded it), the
:class:`~torch_nsight.record.Source` records saying where the rows came from, and what else
the source knows (replicated sibling groups, the calls table, sweep records, PyTorch
settings). Nothing downstream knows which reader ran. Readers are tried in :data:`READERS`
order; :func:`register_reader` adds one. One module per reader:

==============================================  ==========================================
:mod:`~torch_nsight.report.sweep_source`        a sweep's output directory
:mod:`~torch_nsight.report.timeline_source`     a timeline's output directory
:mod:`~torch_nsight.report.saved_source`        a saved profile (``.parquet``)
:mod:`~torch_nsight.report.ncu_source`          an Nsight Compute report (``.ncu-rep``)
:mod:`~torch_nsight.report.trace_source`        a PyTorch profiler trace (``.json``)
==============================================  ==========================================
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

from torch_nsight import formats
from torch_nsight.checks import damage_refused
from torch_nsight.errors import ReportError
from torch_nsight.report.expand import EXPANSION_ERRORS, open_compressed
from torch_nsight.report.ncu_source import NcuReport, is_report
from torch_nsight.report.saved_source import SavedProfile
from torch_nsight.report.source_base import ReadOptions, SourceData, SourceReader, check_times
from torch_nsight.report.sweep_source import SweepDirectory
from torch_nsight.report.timeline_source import TimelineDirectory
from torch_nsight.report.trace_source import TraceFile

logger = logging.getLogger(__name__)

# The registry's interface; a reader's types (defined in source_base) are named here too,
# so that one import serves whoever writes or calls a reader.
__all__ = ["READERS", "register_reader", "read_source", "expand_paths", "ReadOptions",
           "SourceData", "SourceReader"]

READERS: list[SourceReader] = [SweepDirectory(), TimelineDirectory(), SavedProfile(),
                               NcuReport(), TraceFile()]


def register_reader(reader: SourceReader, *, first: bool = True) -> None:
    """Add a source reader (tried before the built-in ones unless ``first`` is False)."""
    if first:
        READERS.insert(0, reader)
    else:
        READERS.append(reader)


def read_source(path: Path, options: ReadOptions) -> SourceData:
    """Read one file or folder with the first reader that accepts it.

    Raises:
        ReportError: it does not exist or is neither a regular file nor a folder (a device,
            a FIFO: never opened, it could block or never end), or no reader accepts it, or
            its reader failed.
    """
    if not path.is_file() and not path.is_dir():
        what = "is not a regular file (a device, a FIFO?)" if path.exists() else "does not exist"
        raise ReportError(f"{path} {what}: pass an Nsight Compute report "
                          "(.ncu-rep, .ncu-rep.xz), a saved profile (.parquet), a sweep's or "
                          "timeline's output directory, or a PyTorch profiler trace (.json)")
    for reader in READERS:
        if reader.accepts(path):
            logger.debug("reading %s as %s", path, reader.name)
            try:
                with damage_refused(options.strict):
                    data = reader.read(path, options)
                    if not data.analyzed:  # a saved profile's reader checked its own
                        data.kernels = check_times(data.kernels, str(path), missing_ok=True)
            except ReportError as err:
                hint = _misnamed(path)
                if hint is None:
                    raise
                raise type(err)(f"{err}; {hint}") from err  # the same kind of error
            return data
    raise ReportError(f"{path} is not a source torch_nsight reads: pass an Nsight Compute "
                      "report (.ncu-rep, .ncu-rep.xz), a saved profile (.parquet), a "
                      "sweep's or timeline's output directory, or a PyTorch profiler trace "
                      "(.json, .json.gz)")


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


def _holds_trace_events(path: Path, window: int = 1 << 20) -> bool:
    """Whether the first MiB of a JSON file (plain, gzip or xz) names ``traceEvents``."""
    try:
        with open_compressed(path) as handle:  # one window: no bomb goes off
            return b'"traceEvents"' in handle.read(window)
    except EXPANSION_ERRORS:
        return True  # damaged: let its reader say so


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
