"""What every source reader shares: :class:`ReadOptions` in, :class:`SourceData` out, the
:class:`SourceReader` protocol, and the small checks several readers make.

The readers (``*_source.py``) import this module and the registry
(:mod:`torch_nsight.report.sources`) imports the readers, so nothing imports back.
"""

from __future__ import annotations

import logging
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import pandas as pd

from torch_nsight.checks import DAMAGED, LARGEST, LeftOut
from torch_nsight.errors import ReportError
from torch_nsight.metrics import METRICS
from torch_nsight.record import CollectionRecord, Source

logger = logging.getLogger(__name__)
_RANK_NAME = re.compile(r"rank(\d+)$")


@dataclass
class ReadOptions:
    """How sources are read.

    Attributes:
        cache: keep each report's tidy table in a cache (see :mod:`~torch_nsight.report.cache`).
        cache_dir: where caches go (None: beside each report, or ``$TORCH_NSIGHT_CACHE_DIR``).
        strict: a damaged source, one whose reader leaves records out (a report cut short,
            events or rows with invalid numbers), is a :class:`ReportError` instead of a
            warning (``compare``: a file cut short must not read as a faster run).
    """

    cache: bool = True
    cache_dir: str | os.PathLike[str] | None = None
    strict: bool = False


@dataclass
class SourceData:
    """What one reader read.

    Attributes:
        kernels: the raw table (or, with ``analyzed``, a table analyzed before it was saved).
        sources: where its rows came from.
        analyzed: the table is already analyzed (a saved profile).
        replication: sibling groups whose representative's rows stand for the replicas
            (``representative``, ``replicas``, ``variant``, ``shape``).
        calls: the raw calls table
            (:data:`~torch_nsight.report.calls_table.CALLS_COLUMNS`), or None.
        sweeps: the sweeps that made it.
        settings: PyTorch settings of the profiled process, where known.
        timeline: step windows and idle gaps of a PyTorch profiler trace
            (:data:`~torch_nsight.report.trace_timeline.TIMELINE_COLUMNS`), or None.
    """

    kernels: pd.DataFrame
    sources: list[Source]
    analyzed: bool = False
    replication: list[dict[str, Any]] = field(default_factory=list)
    calls: pd.DataFrame | None = None
    sweeps: list[CollectionRecord] = field(default_factory=list)
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


def rank_in_name(stem: str) -> int | None:
    """The distributed rank a file name's stem ends with (``report-rank0``, as
    ``torch-nsight profile --ranks`` names them), or None."""
    match = _RANK_NAME.search(stem)
    return int(match.group(1)) if match else None


def inside(folder: Path, name: str, where: str) -> Path:
    """``folder / name``, where ``name`` comes from ``where`` (a manifest, or a file beside
    the one read), checked to stay inside ``folder`` once every link is resolved.

    Raises:
        ReportError: an absolute path, a ``..`` out of ``folder``, or a link leading
            elsewhere.
    """
    candidate = folder / name
    root = folder.resolve()
    if (not name or Path(name).is_absolute()
            or not candidate.resolve().is_relative_to(root)):
        raise ReportError(f"{where} leads outside {folder} ({name!r} is "
                          f"{candidate.resolve()}): torch_nsight reads only files inside the "
                          "folder it is given; copy that file into it")
    return candidate


def refuse_repeats(files: list[Path], what: str, where: str) -> None:
    """Refuse a manifest that names one file more than once: each of its times would count
    twice, or three times, silently.

    Args:
        files: the files its entries name (as :func:`inside` gives them).
        what: what an entry is (``child``, ``item``).
        where: the manifest, for the message.

    Raises:
        ReportError: a file is named more than once.
    """
    counts: dict[Path, int] = {}
    for file in files:
        counts[file.resolve()] = counts.get(file.resolve(), 0) + 1
    repeated = [f"{file.name} {n} times" for file, n in counts.items() if n > 1]
    if repeated:
        raise ReportError(f"{where} lists the same {what} more than once "
                          f"({', '.join(repeated[:3])}{', ...' if len(repeated) > 3 else ''}):"
                          f" its times would count more than once; {DAMAGED}")


#: The kernel table's columns that hold numbers (its metrics); ``duration_ns`` is required.
NUMBER_COLUMNS = tuple(m.column for m in METRICS if m.column != "gpu")


def check_times(frame: pd.DataFrame, where: str, *, missing_ok: bool = False
                ) -> pd.DataFrame:
    """A kernel table with its number columns checked and its invalid values left out.

    Rows whose ``duration_ns`` is zero or negative (no kernel runs in no time: every time
    share, speed and roofline place would divide by it), or missing (unless ``missing_ok``:
    a report may lack the metric), or with a number that is infinite or beyond
    :data:`~torch_nsight.checks.LARGEST`, are left out with one counted warning.

    Args:
        frame: the table a reader read from ``where``.
        where: the file, for messages.
        missing_ok: keep rows without a duration (NaN).

    Raises:
        ReportError: the table lacks ``duration_ns``, or a number column holds text.
    """
    if "duration_ns" not in frame:
        raise ReportError(f"{where} lacks the column 'duration_ns' (every kernel's time): it "
                          f"was not written by torch_nsight, or {DAMAGED.split(': ', 1)[0]}")
    for column in NUMBER_COLUMNS:
        if column in frame and not pd.api.types.is_numeric_dtype(frame[column]):
            values = frame[column]
            numbers = pd.to_numeric(values.map(lambda v: v if not isinstance(v, bool) and
                                               isinstance(v, (int, float)) else np.nan),
                                    errors="coerce")
            if (numbers.isna() & values.notna()).any():
                raise ReportError(f"{where}: column {column!r} holds values that are not "
                                  f"numbers; {DAMAGED}")
            frame[column] = numbers.astype("float64")
    duration = frame["duration_ns"].astype("float64")
    bad = duration <= 0
    if not missing_ok:
        bad |= duration.isna()
    huge_rows = np.zeros(len(frame), dtype=bool)
    for column in frame.select_dtypes("number").columns:  # a column at a time: no copy of
        # the table as one matrix (a trace's 85 columns of NaN were most of its time)
        huge_rows |= np.abs(frame[column].astype("float64").to_numpy()) > LARGEST  # inf too
    huge = pd.Series(huge_rows, index=frame.index)
    left = LeftOut(where, "kernels")
    left.add("", "invalid durations (zero, negative or missing)", int(bad.sum()))
    left.add("", "infinite or out-of-range numbers", int((huge & ~bad).sum()))
    if left:
        left.warn()
        frame = frame.loc[~(bad | huge)].reset_index(drop=True)
    return _unknown_zero_peaks(frame, where)


#: The device's peaks and clocks: a roofline multiplies them, and divides by them.
RATE_COLUMNS = tuple(m.column for m in METRICS if m.kind in ("peak", "clock"))


def _unknown_zero_peaks(frame: pd.DataFrame, where: str) -> pd.DataFrame:
    """``frame`` with peaks and clocks of zero or less read as unknown (NaN): no device
    runs at no clock, and a ceiling of zero would put every kernel above it. The rows stay
    (their times are good); their peaks come from the table of known GPUs, or none."""
    columns = [c for c in RATE_COLUMNS if c in frame]
    if not columns or frame.empty:
        return frame
    rates = frame[columns].astype("float64")
    zero = rates <= 0
    if zero.to_numpy().any():
        logger.warning("%s: %d kernels with peaks or clocks of zero or less: read as unknown "
                       "(no roofline from them)", where, int(zero.any(axis=1).sum()))
        frame[columns] = rates.mask(zero)
    return frame
