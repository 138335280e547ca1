"""The front door of the report side: :func:`load` reads sources into one analyzed
:class:`~torch_nsight.profile.Profile`, and decides how their rows are labelled.

It reads every path with the registry of :mod:`torch_nsight.report.sources` (Nsight
Compute reports, saved profiles, sweep and timeline directories, PyTorch profiler traces),
runs the analysis passes (:func:`torch_nsight.analyze.analyze`) on each source's raw
table, labels the rows of sources that would otherwise be averaged together, and joins
them into one Profile.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from torch_nsight import analyze as analysis
from torch_nsight.analyze.frames import label_keys
from torch_nsight.files import path_text
from torch_nsight.profile import PathArg, Profile, order_columns, warn_if_mixed, worded
from torch_nsight.record import ProfileMeta, Source
from torch_nsight.report.calls_table import read_calls
from torch_nsight.report.sources import ReadOptions, SourceData, expand_paths, read_source

logger = logging.getLogger(__name__)

__all__ = ["load"]


def _paths(paths: PathArg | Iterable[PathArg]) -> list[Path]:
    if isinstance(paths, (str, os.PathLike)):
        return [Path(paths)]
    if not isinstance(paths, Iterable):
        raise TypeError(f"paths must be a path or an iterable of paths, got "
                        f"{type(paths).__name__}")
    out = []
    for item in paths:
        if not isinstance(item, (str, os.PathLike)):
            raise TypeError(f"paths must hold str or os.PathLike items, got "
                            f"{type(item).__name__}")
        out.append(Path(item))
    if not out:
        raise ValueError("paths is empty: pass at least one report, saved profile or sweep "
                         "directory")
    return out


def _label_of(path: Path) -> str:
    name = path_text(path.name)  # a label is stored and printed
    for suffix in (".ncu-rep.xz", ".ncu-rep", ".parquet"):
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def _check_labels(labels: Any, files: list[Path]) -> list[str] | None:
    if labels is None:
        return None
    if isinstance(labels, str) or not all(isinstance(s, str) for s in labels):
        raise TypeError("labels must be a sequence of str, one per path")
    if len(labels) != len(files):
        raise ValueError(f"labels has {len(labels)} labels for {len(files)} paths")
    return list(labels)


def load(paths: PathArg | Iterable[PathArg], *, labels: Sequence[str] | None = None,
         shapes: Sequence[str] | None = None, calls: PathArg | None = None,
         cache: bool = True, cache_dir: PathArg | None = None, strict: bool = False
         ) -> Profile:
    """Read reports, saved profiles and sweep directories into one analyzed :class:`Profile`.

    Args:
        paths: one or several of: an Nsight Compute report (``.ncu-rep``, ``.ncu-rep.xz``;
            a ``NAME.calls.json`` beside ``NAME.ncu-rep`` is read as its calls table), a
            profile saved by :meth:`Profile.save` (``.parquet``), a sweep's output
            directory (every row, replicated layers included), or a folder of reports.
        labels: a label per path: rows without a shape label get it as their ``shape``;
            rows with one (from a sweep) get it as their ``variant``, so that two runs of
            one shape stay apart. Without it, sources whose labels would collide are
            labelled by file name: different runs are never averaged together silently.
            Give two paths the same label to average them as runs of one thing.
        shapes: the former name of ``labels``.
        calls: a calls file (``instrument(model, record_calls=PATH)``) for reports recorded
            by hand, when it is not beside the report.
        cache: keep each report's tidy table in a cache so that the next load is fast
            (see :mod:`torch_nsight.report.cache`).
        cache_dir: where caches go; default beside each report (skipped quietly where that
            folder is read-only), or ``$TORCH_NSIGHT_CACHE_DIR`` when set.
        strict: refuse a damaged source (its reader would leave records out, with a
            warning) with :class:`ReportError`: what a comparison or a gate should do.

    Returns:
        The profile.

    Raises:
        TypeError: an argument has the wrong type.
        ValueError: ``paths`` is empty, ``labels`` has a different length, or ``calls`` is
            given with more than one path.
        ReportError: a file is missing, unreadable, or not a source torch_nsight reads (or,
            with ``strict``, damaged).
        MissingMetricError: a source lacks a column the analysis needs.
    """
    if labels is not None and shapes is not None:
        raise TypeError("pass labels or shapes (its former name), not both")
    files, given = _files_and_labels(paths, labels if labels is not None else shapes)
    parts = _read(files, ReadOptions(cache=cache, cache_dir=cache_dir, strict=strict), calls)
    tables = [_analyzed(part) for part in parts]
    call_tables = [None if p.calls is None or p.calls.empty
                   else p.calls if p.analyzed else analysis.attribute_calls(p.calls)
                   for p in parts]
    chosen = given if given is not None else _auto_labels(files, tables)
    profile = _join(parts, tables, call_tables, chosen)
    for note in profile.notes:
        logger.warning("%s", note)
    warn_if_mixed(profile)
    if len(profile.kernels):
        logger.info("loaded %d kernels from %d source(s); %.0f%% of GPU time attributed",
                    len(profile.kernels), len(files), 100 * profile.coverage)
    else:
        logger.info("loaded no kernels from %d source(s)", len(files))
    return profile


def _files_and_labels(paths: PathArg | Iterable[PathArg], given: Sequence[str] | None
                      ) -> tuple[list[Path], list[str] | None]:
    """The sources to read (folders of reports expanded) and the labels given for them,
    checked."""
    files = _paths(paths)
    expanded = expand_paths(files)
    if given is not None and len(expanded) != len(files):
        raise ValueError("labels name one source each, but a folder of reports was given: "
                         "pass its files one by one with a label each")
    return _once(expanded, _check_labels(given, expanded))


def _once(files: list[Path], labels: list[str] | None
          ) -> tuple[list[Path], list[str] | None]:
    """``files`` and their labels with a file given again under the same label read once:
    its rows, counted once per (source, run), would otherwise add up as one run of twice the
    time."""
    seen: set[tuple[str, str | None]] = set()
    kept: list[int] = []
    for index, file in enumerate(files):
        key = (os.path.realpath(file), labels[index] if labels is not None else None)
        if key in seen:
            logger.warning("%s is given twice%s: read once", file,
                           f" with the label {key[1]!r}" if key[1] is not None else "")
            continue
        seen.add(key)
        kept.append(index)
    return ([files[i] for i in kept],
            [labels[i] for i in kept] if labels is not None else None)


def _read(files: list[Path], options: ReadOptions, calls: PathArg | None) -> list[SourceData]:
    """Read every source; ``calls`` is the calls file of the only one."""
    parts = [read_source(file, options) for file in _progress(files)]
    if calls is not None:
        if len(parts) != 1 or parts[0].analyzed:
            raise ValueError("calls= gives the calls file of one report recorded by hand: pass "
                             "that single .ncu-rep with it (a calls file beside each report, "
                             "NAME.calls.json next to NAME.ncu-rep, is read without calls=)")
        # the file given replaces a table the report carries (the same iteration, recorded
        # once: instrument(record_calls=PATH) under ncu writes both)
        parts[0].calls = read_calls(Path(calls))
    return parts


def _join(parts: list[SourceData], tables: list[pd.DataFrame],
          call_tables: list[pd.DataFrame | None], chosen: Sequence[str | None]) -> Profile:
    """One profile of the sources' analyzed tables, each source's rows given its label."""
    sources: list[Source] = []
    timelines = [part.timeline for part in parts]
    for index, (part, label) in enumerate(zip(parts, chosen, strict=True)):
        sources.extend(dataclasses.replace(s, label=label) if label else s for s in part.sources)
        if label:
            tables[index] = analysis.label_rows(tables[index], label)
            if call_tables[index] is not None:
                call_tables[index] = analysis.label_rows(call_tables[index], label)
            if timelines[index] is not None:
                timelines[index] = analysis.label_rows(timelines[index], label)
    kernels = pd.concat(tables, ignore_index=True) if len(tables) > 1 else tables[0]
    kept_calls = [c for c in call_tables if c is not None]
    meta = ProfileMeta.merge(ProfileMeta(tuple(part.sources), tuple(part.sweeps),
                                         dict(part.settings)) for part in parts)
    meta = dataclasses.replace(meta, sources=tuple(sources))
    kept_timelines = [t for t in timelines if t is not None]
    return Profile(order_columns(kernels), meta,
                   pd.concat(kept_calls, ignore_index=True) if kept_calls else None,
                   pd.concat(kept_timelines, ignore_index=True) if kept_timelines else None)


def _progress(files: list[Path]) -> Iterable[Path]:
    """``files``, with a progress bar on a terminal or in a notebook when there are many."""
    if len(files) < 4:
        return files
    from tqdm.auto import tqdm

    return tqdm(files, desc="torch_nsight load", unit="source", disable=None, leave=False)


def _analyzed(part: SourceData) -> pd.DataFrame:
    """The analyzed kernel table of one source, with its provenance columns."""
    if part.analyzed:
        return part.kernels.copy()
    calls = analysis.attribute_calls(part.calls) if part.calls is not None and len(part.calls) \
        else None
    kernels = analysis.analyze(part.kernels, part.replication, calls=calls,
                            settings=part.settings)
    by_path = {s.path: s.metric_set for s in part.sources}
    kernels["metric_set"] = [by_path.get(s) for s in kernels["source"].tolist()]
    return worded("kernels", kernels, quiet=True)  # its reasons, where render is imported


def _auto_labels(files: list[Path], tables: list[pd.DataFrame]) -> list[str | None]:
    """Labels for sources whose (variant, shape) labels collide with another source's: the
    file's name, so that different runs are never averaged together silently."""
    keys = [label_keys(t) for t in tables]
    labels: list[str | None] = [None] * len(tables)
    for i, mine in enumerate(keys):
        if any(mine & other for j, other in enumerate(keys) if j != i):
            labels[i] = _label_of(files[i])
    named = [label for label in labels if label]
    for i, label in enumerate(labels):
        if label and named.count(label) > 1:
            labels[i] = f"{label}#{i}"
    if named:
        logger.info("sources share shape labels; told apart by file name: %s",
                    ", ".join(f"{files[i].name} -> {labels[i]}" for i in range(len(files))
                              if labels[i]))
    return labels
