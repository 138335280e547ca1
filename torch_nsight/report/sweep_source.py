"""The reader of a sweep's output directory (:func:`torch_nsight.sweep`; see
:mod:`torch_nsight.formats`): every child's report, the replicated sibling groups, the calls
table and how each (variant, shape) ended, from its manifest; a focused sweep's timeline
rows for the kernels ncu skipped (:mod:`torch_nsight.report.focused_kernels`)."""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path
from typing import Any

import pandas as pd

from torch_nsight import formats
from torch_nsight.checks import DAMAGED, check_schema
from torch_nsight.errors import ReportError
from torch_nsight.files import path_text
from torch_nsight.record import CollectionRecord, Source
from torch_nsight.report.calls_table import calls_frame
from torch_nsight.report.focused_kernels import TIMELINE_FOLDER, stand_in_rows
from torch_nsight.report.kernel_table import empty_raw_table, read_report
from torch_nsight.report.ncu_source import attribute_compiled, report_source
from torch_nsight.report.source_base import ReadOptions, SourceData, inside, refuse_repeats

logger = logging.getLogger(__name__)


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
        check_schema(manifest, formats.SWEEP_SCHEMA, str(path / formats.SWEEP_MANIFEST))
        try:
            record = CollectionRecord.from_dict(manifest.get("record") or {})
        except TypeError as err:  # a field of another type than the schema's
            raise ReportError(f"{path / formats.SWEEP_MANIFEST}: its record does not hold a "
                              f"sweep's record ({err}); {DAMAGED}") from err
        frames, sources = [], []
        missing: list[str] = []
        where = f"{path / formats.SWEEP_MANIFEST}"
        children: list[tuple[dict[str, Any], str]] = []
        for child in manifest.get("children") or []:
            report = child.get("report")
            if not report:
                continue
            if not inside(path, report, where).is_file() and (path / f"{report}.xz").is_file():
                report = f"{report}.xz"  # compressed after the sweep (as tests/data keeps it)
                inside(path, report, where)
            children.append((child, report))
        refuse_repeats([path / report for _, report in children], "child report", where)
        for child, report in children:
            if not (path / report).is_file():
                missing.append(f"{child.get('name')} ({report})")
                continue
            frame, meta = read_report(path / report, cache=options.cache,
                                      cache_dir=options.cache_dir)
            frame = attribute_compiled(frame, path / report)
            frames.append(frame)
            sources.append(dataclasses.replace(report_source(path / report, self.name, frame,
                                                             meta), note=None))
        if not frames and not record.dry_run:
            raise ReportError(f"the sweep directory {path} holds no readable report: every "
                              "child failed (see sweep.json and the *.log files there)")
        if missing:
            note = (f"the report of child {', '.join(missing)} is missing from {path}: the "
                    "shapes it ran have no rows")
            sources = [dataclasses.replace(s, note=note) for s in sources] or sources
        kernels = pd.concat(frames, ignore_index=True) if frames else empty_raw_table()
        timeline = None
        if record.options.get("focus") is not None:  # the timeline's rows for the rest
            folder = path / TIMELINE_FOLDER
            if folder.exists() or folder.is_symlink():
                inside(path, TIMELINE_FOLDER, f"the focused sweep's {folder}")
            extra, timeline = stand_in_rows(kernels, folder,
                                            record.options.get("focused_kernels") or (),
                                            manifest.get("replication") or ())
            kernels = pd.concat([kernels.assign(deep_profiled=True), extra],
                                ignore_index=True)
        calls = calls_frame(manifest.get("calls") or [], path_text(path.resolve()))
        return SourceData(kernels, sources or [Source(path=path_text(path.resolve()), kind=self.name)],
                          replication=list(manifest.get("replication") or []), calls=calls,
                          sweeps=[record], settings=dict(manifest.get("settings") or {}),
                          timeline=timeline)
