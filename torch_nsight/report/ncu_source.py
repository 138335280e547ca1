"""The reader of Nsight Compute reports (``.ncu-rep``, ``.ncu-rep.xz``), with the calls
table beside them (``NAME.calls.json``) or carried inside them, and the launches
``profile --replicate-launches`` did not profile (:mod:`torch_nsight.report.launch_replicas`).

A report's raw table (:func:`~torch_nsight.report.kernel_table.read_report`) loses the kernels that
only carry messages (the calls table, compiled graphs' kernel maps); the kernels of compiled
graphs get their modules; the :class:`~torch_nsight.record.Source` says why no kernel is
attributed, when none is. :class:`~torch_nsight.report.sweep_source.SweepDirectory` reads
its children's reports with the same steps.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from torch_nsight import formats, naming
from torch_nsight.calls_file import check_call_rows
from torch_nsight.errors import ReportError
from torch_nsight.files import path_text
from torch_nsight.record import Source
from torch_nsight.report.calls_table import calls_frame, read_calls
from torch_nsight.report.compiled_attribution import read_maps, resolve_compiled, take_carried
from torch_nsight.report.kernel_table import read_report
from torch_nsight.report.launch_replicas import with_replicated_launches
from torch_nsight.report.op_replicas import split_carried_op_replicas, with_op_replicas
from torch_nsight.report.source_base import ReadOptions, SourceData, inside, rank_in_name
from torch_nsight.report.stall_merge import find_stall_report, merge_stall_pass

logger = logging.getLogger(__name__)

REPORT_SUFFIXES = (".ncu-rep", ".ncu-rep.xz")


def is_report(path: Path) -> bool:
    """Whether ``path`` is named like an Nsight Compute report."""
    return path.name.endswith(REPORT_SUFFIXES)


class NcuReport:
    """``.ncu-rep`` / ``.ncu-rep.xz`` files written by ``ncu -o``, with the calls file
    (``NAME.calls.json``) beside them when there is one."""

    name = "ncu-report"

    def accepts(self, path: Path) -> bool:
        """Files named ``*.ncu-rep`` or ``*.ncu-rep.xz``."""
        return is_report(path)

    def read(self, path: Path, options: ReadOptions) -> SourceData:
        """Read the report (through its cache when allowed)."""
        frame, meta = read_report(path, cache=options.cache, cache_dir=options.cache_dir)
        frame["rank"] = pd.Series([rank_of(path)] * len(frame), index=frame.index,
                                  dtype="Int64")
        frame, carried = split_carried_calls(frame, path)
        frame, replication = split_carried_replication(frame, path)
        frame = with_op_replicas(*split_carried_op_replicas(frame, path), path)
        frame = attribute_compiled(frame, path)
        frame = with_replicated_launches(with_stall_pass(frame, path, options), path, options)
        source = report_source(path, self.name, frame, meta)
        if source.note is None:
            source = dataclasses.replace(source, note=_sweep_note(path, frame))
        calls_file = calls_beside(path)
        if calls_file.is_file():
            inside(path.parent, calls_file.name, f"the calls file beside {path}")
            calls = read_calls(calls_file)
        else:
            calls = calls_frame(carried, path_text(path.resolve())) if carried is not None else None
        return SourceData(frame, [source], replication=replication, calls=calls)


def with_stall_pass(frame: pd.DataFrame, path: Path, options: ReadOptions) -> pd.DataFrame:
    """``frame`` with the warp states of the focused second pass beside ``path``, when there
    is one (:mod:`torch_nsight.report.stall_merge`); a second pass that cannot be read is
    said and left out."""
    second = find_stall_report(path)
    if second is None:
        return frame
    try:
        inside(path.parent, str(second.relative_to(path.parent)),
               f"the second pass beside {path}")
        found, _ = read_report(second, cache=options.cache, cache_dir=options.cache_dir)
        found, _ = split_carried_calls(found, second)
        found, _ = split_carried_replication(found, second)
        return merge_stall_pass(frame, attribute_compiled(found, second))
    except Exception as err:  # noqa: BLE001 - extra data: never lose the first pass for it
        logger.warning("%s: its second pass (--stalls) is left out: %s: %s", path.name,
                       type(err).__name__, err)
        return frame


def range_note(frame: pd.DataFrame) -> str | None:
    """Why a raw table's kernels cannot be attributed to modules, with the fix; None if some
    kernel ran inside a torch_nsight module range."""
    if frame.empty:
        return None
    for stack in frame["range_stack"]:
        if any(naming.parse_message(m).kind == "module" and m != naming.MEASURE_MESSAGE
               and naming.parse_measure_range(m) is None and m != naming.WARMUP_MESSAGE
               for m in stack or ()):
            return None
    other = [m for ranges in frame["range_other"] for m in ranges or ()]
    fix = ("wrap the model in torch_nsight.instrument() while ncu records it with --nvtx, "
           "or profile with torch_nsight.sweep()")
    if any(m.startswith("aten::") or ", seq = " in m for m in other):
        return ("its NVTX ranges name aten ops (torch.autograd.profiler.emit_nvtx or nsys "
                "--pytorch=autograd-nvtx), not modules, so no kernel is attributed: " + fix)
    if not other and not any(frame["range_start_end"].map(bool)):
        return "it carries no NVTX ranges (recorded without `ncu --nvtx`?): " + fix
    return "none of its kernels ran inside a torch_nsight module range: " + fix


def report_source(path: Path, kind: str, frame: pd.DataFrame,
                  meta: Mapping[str, Any]) -> Source:
    """The :class:`Source` of one Nsight Compute report, from its table and metadata; its
    note says why no kernel is attributed, when none is."""
    gpu = meta.get("gpu")
    note = range_note(frame)
    return Source(path=path_text(path.resolve()), kind=kind,
                  gpu=tuple(gpu if isinstance(gpu, list) else [gpu] if gpu else []),
                  ncu_version=meta.get("ncu_version"), reader_version=meta.get("reader_version"),
                  metric_set=meta.get("metric_set"),
                  missing_metrics=tuple(meta.get("missing_metrics") or ()),
                  has_module_ranges=note is None, note=note)


def _sweep_note(path: Path, frame: pd.DataFrame) -> str | None:
    """A child's report of a sweep whose directory holds replicated rows it lacks."""
    if not formats.is_sweep_dir(path.parent):
        return None
    if not any(naming.parse_measure_range(m) for ranges in frame["range_start_end"]
               for m in ranges or ()):
        return None
    try:
        manifest = formats.read_tagged(path.parent / formats.SWEEP_MANIFEST,
                                       formats.SWEEP_KIND, formats.SWEEP_FORMAT)
    except formats.FormatError:
        return None
    if not manifest.get("replication"):
        return None
    return (f"it is one report of the sweep in {path.parent}, whose replicated layers are "
            f"not in it: load the directory ({path.parent}) to get every row")


def split_carried_calls(frame: pd.DataFrame, path: Path
                        ) -> tuple[pd.DataFrame, list[dict[str, Any]] | None]:
    """Take the calls table a report carries (:mod:`torch_nsight.capture.calls.embed`) out of it.

    Returns:
        (the kernel table without the carrier kernels, the calls rows or None). A damaged
        message is logged and skipped.
    """
    frame, messages = take_carried(frame, formats.CALLS_MESSAGE_PREFIX)
    tables = []
    for message in messages:
        try:
            tables.append(check_call_rows(formats.decode_calls(message), str(path)))
        except (formats.FormatError, ReportError) as err:
            logger.warning("%s: skipping a carried calls table: %s", path.name, err)
    if len(tables) > 1:
        logger.warning("%s carries %d calls tables (several instrumented models?): the "
                       "first is used", path.name, len(tables))
    return frame, tables[0] if tables else None


def split_carried_replication(frame: pd.DataFrame, path: Path
                              ) -> tuple[pd.DataFrame, list[dict[str, Any]]]:
    """Take the replicated sibling groups a profiled script carries
    (:class:`~torch_nsight.capture.replicas.replica.ScriptReplication`) out of the report.

    Returns:
        (the kernel table without the carrier kernel, the groups: ``representative``,
        ``replicas``). A damaged message is logged and skipped.
    """
    frame, messages = take_carried(frame, formats.REPLICATION_PREFIX)
    groups: list[dict[str, Any]] = []
    for message in messages:
        try:
            document = formats.unpack_message(message, formats.REPLICATION_PREFIX,
                                              formats.REPLICATION_KIND)
        except formats.FormatError as err:
            logger.warning("%s: skipping its replicated siblings: %s", path.name, err)
            continue
        groups.extend({"representative": str(g["representative"]),
                       "replicas": [str(r) for r in g["replicas"]]}
                      for g in document.get("groups") or ()
                      if isinstance(g, dict) and g.get("representative")
                      and isinstance(g.get("replicas"), list))
    return frame, groups


def attribute_compiled(frame: pd.DataFrame, path: Path) -> pd.DataFrame:
    """Give the kernels of compiled graphs the modules their carried maps name
    (:mod:`torch_nsight.report.compiled_attribution`), the carrier kernels taken out."""
    frame, messages = take_carried(frame, formats.COMPILED_MAP_PREFIX)
    return resolve_compiled(frame, read_maps(messages, path.name))


def rank_of(report: Path) -> int | None:
    """The distributed rank a report was recorded for, from its name (``report-rank0``, as
    ``torch-nsight profile --ranks`` names them), or None."""
    return rank_in_name(calls_beside(report).name.removesuffix(formats.CALLS_SUFFIX))


def calls_beside(report: Path) -> Path:
    """Where the calls file of ``report`` is looked for: ``run.calls.json`` for
    ``run.ncu-rep`` or ``run.ncu-rep.xz``."""
    stem = report.name
    for suffix in sorted(REPORT_SUFFIXES, key=len, reverse=True):
        if stem.endswith(suffix):
            stem = stem[: -len(suffix)]
            break
    return report.with_name(stem + formats.CALLS_SUFFIX)
