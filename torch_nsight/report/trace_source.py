"""The reader of Chrome traces written by PyTorch's profiler (``.json``, ``.json.gz``,
``.json.xz``; read by :mod:`torch_nsight.report.trace_events`, parsed by
:mod:`torch_nsight.report.trace`): kernel times and the timeline,
no hardware counters."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from torch_nsight import formats, naming
from torch_nsight.errors import ReportError
from torch_nsight.files import path_text
from torch_nsight.record import Source
from torch_nsight.report.source_base import ReadOptions, SourceData
from torch_nsight.report.trace import GRAPH_REPLAY, trace_tables
from torch_nsight.units import counted


class TraceFile:
    """A Chrome trace written by PyTorch's profiler (``.json``, ``.json.gz``, ``.json.xz``):
    kernel times and the timeline, no hardware counters."""

    name = "trace"

    def accepts(self, path: Path) -> bool:
        """Files named like a trace."""
        return path.is_file() and formats.is_trace(path)

    def read(self, path: Path, options: ReadOptions) -> SourceData:
        """Parse the trace."""
        frame, timeline, gpu = trace_tables(path)
        if frame.empty:
            raise ReportError(f"{path} holds no GPU activity: record the trace on a CUDA GPU "
                              "with ProfilerActivity.CUDA among the profiler's activities")
        return SourceData(frame, [trace_source(path, self.name, frame, gpu)],
                          timeline=timeline)


def trace_source(path: Path, kind: str, frame: pd.DataFrame, gpu: str | None) -> Source:
    """The :class:`Source` of one trace, from its raw table; its note says why kernels are
    not attributed, when some are not."""
    known: dict[tuple[str, ...], bool] = {}  # launches share stacks: each read once
    in_module = pd.Series([known[s] if s in known else known.setdefault(s, _in_module(s))
                           for s in frame["range_stack"].tolist()], index=frame.index,
                          dtype=bool)
    note = None if in_module.any() or frame.empty else (
        "none of its GPU activity ran inside a torch_nsight range: record it with "
        "torch_nsight.timeline(), or instrument the model with "
        "instrument(model, emitter=RecordFunctionEmitter()) inside torch.profiler")
    replayed = (~in_module & frame["range_other"].map(lambda o: GRAPH_REPLAY in (o or ())))
    if note is None and replayed.any():
        note = (f"{counted(int(replayed.sum()), 'kernel')} replayed from CUDA graphs ran outside module "
                "ranges (graph: unattributed): ranges are recorded when a graph is captured, "
                "not when it replays; torch.compile(mode='reduce-overhead') graphs are "
                "attributed")
    return Source(path=path_text(path.resolve()), kind=kind, gpu=(gpu,) if gpu else (),
                  metric_set="timeline", has_module_ranges=bool(in_module.any()) or frame.empty,
                  note=note)


def _in_module(stack: tuple[str, ...]) -> bool:
    return any(naming.parse_message(m).kind == "module" for m in stack)
