"""The reader of :func:`torch_nsight.timeline`'s output directory: its manifest
(:data:`~torch_nsight.formats.TIMELINE_MANIFEST`) and one PyTorch profiler trace per
(variant, shape), each parsed with the step windows the manifest names."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pandas as pd

from torch_nsight import formats
from torch_nsight.checks import check_schema
from torch_nsight.errors import ReportError
from torch_nsight.files import path_text
from torch_nsight.record import CollectionRecord
from torch_nsight.report.source_base import (
    ReadOptions,
    SourceData,
    inside,
    rank_in_name,
    refuse_repeats,
)
from torch_nsight.report.trace import trace_tables
from torch_nsight.report.trace_source import trace_source


class TimelineDirectory:
    """The output directory of :func:`torch_nsight.timeline`: its manifest and one trace per
    (variant, shape)."""

    name = "timeline"

    def accepts(self, path: Path) -> bool:
        """Folders holding a timeline manifest."""
        return formats.is_timeline_dir(path)

    def read(self, path: Path, options: ReadOptions) -> SourceData:
        """Read the manifest and every trace it names."""
        try:
            manifest = formats.read_tagged(path / formats.TIMELINE_MANIFEST,
                                           formats.TIMELINE_KIND, formats.TIMELINE_FORMAT)
        except formats.FormatError as err:
            raise ReportError(f"{err}: the timeline directory {path} cannot be read") from err
        check_schema(manifest, formats.TIMELINE_SCHEMA, str(path / formats.TIMELINE_MANIFEST))
        frames, timelines, sources = [], [], []
        where = str(path / formats.TIMELINE_MANIFEST)
        items = [(item, item.get("trace")) for item in manifest.get("items") or []]
        refuse_repeats([inside(path, trace, where) for _, trace in items if trace],
                       "trace", where)
        for item, trace in items:
            if not trace or not inside(path, trace, where).is_file():
                continue
            steps = {f"{item.get('variant', '')}|{item.get('shape', '')}": item}
            frame, timeline, gpu = trace_tables(path / trace, steps, measured_only=True)
            frame["rank"] = pd.Series([rank_in_name(trace.split(".")[0])] * len(frame),
                                      index=frame.index, dtype="Int64")
            frames.append(frame)
            timelines.append(timeline)
            source = trace_source(path / trace, self.name, frame, gpu)
            if frame.empty:
                source = dataclasses.replace(source, note=(
                    f"no GPU activity: recorded on {manifest.get('device')}, the trace holds "
                    "CPU ops and step times only"))
            sources.append(source)
        failed = [f"{i.get('shape')}: {i.get('error')}" for i in manifest.get("items") or []
                  if i.get("status") == "failed"]
        if failed and sources:
            sources[-1] = dataclasses.replace(sources[-1], note="; ".join(
                filter(None, [sources[-1].note, "failed shapes: " + "; ".join(failed)])))
        if not frames:
            raise ReportError(f"the timeline directory {path} holds no trace: every shape "
                              f"failed ({'; '.join(failed) or 'see the manifest'})")
        return SourceData(pd.concat(frames, ignore_index=True), sources,
                          sweeps=[_record(manifest, path)],
                          settings=dict(manifest.get("settings") or {}),
                          timeline=pd.concat(timelines, ignore_index=True))


def _record(manifest: dict[str, Any], path: Path) -> CollectionRecord:
    """The run as :attr:`Profile.results` and :attr:`Profile.failures` read it: one item
    per (variant, shape), failed ones with their error."""
    items = tuple(dict(i) for i in manifest.get("items") or [] if isinstance(i, dict))
    return CollectionRecord(
        shapes=tuple(dict.fromkeys(str(i["shape"]) for i in items if i.get("shape"))),
        variants=tuple(dict.fromkeys(str(i.get("variant") or "") for i in items)),
        options={"profiler": "torch.profiler", "backward": manifest.get("backward"),
                 "dtype": manifest.get("dtype")},
        items=items, output_dir=path_text(path.resolve()))
