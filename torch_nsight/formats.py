"""Files that pass between stages: a sweep's output directory and a calls file.

Shared by the writers (collect, capture) and the readers (report), like
:mod:`torch_nsight.naming` is for range messages; no torch, no pandas.

A sweep's output directory holds, per child process ``NAME`` (``sweep``, ``sweep-gpu1``):
``NAME.ncu-rep`` (Nsight Compute's report), ``NAME.result.json`` (what the child did),
``NAME.status.jsonl`` (its progress lines) and ``NAME.log`` (its output); and once the sweep
is over, :data:`SWEEP_MANIFEST`: what was asked, how every (variant, shape) ended, which
report each child wrote, the replicated sibling groups and the calls table. Loading the
directory gives every row, replicated layers included; a child's report alone lacks them.

A timeline directory holds :data:`TIMELINE_MANIFEST` (what was run, per (variant, shape):
its trace file and the step times measured outside the profiler, without and with the
module ranges) and one Chrome trace per (variant, shape), ``trace-<n>.json.gz``, as
PyTorch's profiler writes them.

A calls file (``*.calls.json``) holds the torch-level ops of one iteration: per op, the
ranges open around it, its input and output shapes and dtypes, analytic FLOPs and bytes
(:mod:`torch_nsight.calls_file` writes and reads it). The same document also travels
inside a report, as the message of one start/end range (:func:`encode_calls`,
:func:`decode_calls`).
"""

from __future__ import annotations

import base64
import json
import os
import zlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from torch_nsight.checks import NUMBER, WHOLE, whole
from torch_nsight.files import atomic_output

SWEEP_MANIFEST = "sweep.json"
SWEEP_KIND = "torch_nsight.sweep"
SWEEP_FORMAT = 1
PROFILE_FILE = "profile.parquet"
#: A kept sweep's job description, beside its manifest.
SWEEP_JOB = "job.json"
TIMELINE_MANIFEST = "timeline.json"
TIMELINE_KIND = "torch_nsight.timeline"
TIMELINE_FORMAT = 1
#: Suffixes of the Chrome traces PyTorch's profiler writes (``export_chrome_trace``,
#: ``tensorboard_trace_handler``), plain or compressed.
TRACE_SUFFIXES = (".json", ".json.gz", ".json.xz")
CALLS_KIND = "torch_nsight.calls"
CALLS_FORMAT = 1
CALLS_SUFFIX = ".calls.json"
CALLS_ROW_KEYS = ("range_stack", "op", "input_shapes", "input_dtypes", "output_shapes",
                  "output_dtypes", "flops", "bytes", "count")

#: The message of the start/end range around the small kernel that carries the calls table
#: into a report: this prefix, then the document as zlib-compressed JSON in base64.
CALLS_MESSAGE_PREFIX = "calls:"
#: The message of the range that carries the kernel map of one compiled graph call
#: (:mod:`torch_nsight.capture.compiled.inductor`), packed like the calls table.
COMPILED_MAP_PREFIX = "compiled-map:"
COMPILED_MAP_KIND = "torch_nsight.compiled_map"
#: A profiled script's replicated siblings, carried in the report as a range message (the
#: groups :class:`~torch_nsight.capture.replicas.replica.ScriptReplication` checked and left out).
REPLICATION_PREFIX = "replication:"
REPLICATION_KIND = "torch_nsight.replication"
#: The message of the range that carries a profiled step's repeated op calls, which ncu left
#: out (:mod:`torch_nsight.capture.replicas.op_calls`), packed like the calls table.
OP_REPLICAS_PREFIX = "op-replicas:"
OP_REPLICAS_KIND = "torch_nsight.op_replicas"

#: What a reader takes from each file, as :func:`torch_nsight.checks.check_schema` checks it.
CALLS_ROW_SCHEMA = {"range_stack": [str], "op": str, "input_shapes": [[WHOLE]],
                    "input_dtypes": [str], "output_shapes": [[WHOLE]], "output_dtypes": [str],
                    "flops": NUMBER, "bytes": NUMBER, "count": WHOLE, "variant": str,
                    "shape": str, "module_class": str, "args": str}
_RECORD_SCHEMA = {"shapes": [str], "variants": [str], "options": dict, "items": [dict],
                  "problems": [dict], "commands": dict, "output_dir": str, "timing": dict,
                  "created": str}
SWEEP_SCHEMA = {"record": _RECORD_SCHEMA,
                "children": [{"name": str, "report": str}],
                "replication": [{"representative": str, "replicas": [str], "variant": str,
                                 "shape": str}],
                "calls": [CALLS_ROW_SCHEMA], "settings": dict}
TIMELINE_SCHEMA = {"items": [{"variant": str, "shape": str, "trace": str, "status": str,
                              "bare_ns": NUMBER, "ranged_ns": NUMBER, "bare_min_ns": NUMBER,
                              "bare_max_ns": NUMBER}],
                   "settings": dict, "device": str}

REPORT_SUFFIX = ".ncu-rep"
#: The record ``torch-nsight profile`` writes beside its report (``report.run.json``).
RUN_SUFFIX = ".run.json"
RESULT_SUFFIX = ".result.json"
STATUS_SUFFIX = ".status.jsonl"
LOG_SUFFIX = ".log"
#: The folder beside a report that holds its focused second pass (``profile --stalls``):
#: ``out/stalls/report.ncu-rep`` for ``out/report.ncu-rep``. A folder, so that loading
#: ``out/`` does not read the second pass as a report of its own; reading the first report
#: merges it (:mod:`torch_nsight.report.stall_merge`).
STALL_FOLDER = "stalls"
#: The folder beside a report profiled with ``profile --replicate-launches``: the timeline of the
#: same steps (the launch list, recorded without ncu) and :data:`LAUNCH_PLAN`, which launches
#: ncu profiled and which measured launch each other one takes its counters from
#: (:mod:`torch_nsight.report.launch_replicas`).
LAUNCH_FOLDER = "launches"
LAUNCH_PLAN = "plan.json"
#: The launch list's status stream and traces, in :data:`LAUNCH_FOLDER` (the timeline's).
LAUNCH_STATUS = "status.jsonl"
LAUNCH_TRACES = "trace*.json.gz"
#: The folder of a focused sweep's timeline pass (``sweep(..., focus=0.9)``), in its output
#: directory.
FOCUS_FOLDER = "timeline"
LAUNCH_KIND = "torch_nsight.launch_plan"
LAUNCH_FORMAT = 1


class FormatError(ValueError):
    """A file is not of the kind or format its reader expects."""


#: The most bytes a range message's document may expand to (a calls table of 100,000 calls
#: is ~20 MiB).
MESSAGE_LIMIT = 256 << 20


def pack_message(prefix: str, document: Mapping[str, Any]) -> str:
    """A range message carrying ``document``: ``prefix`` + base64 of zlib-compressed JSON."""
    packed = zlib.compress(json.dumps(document, separators=(",", ":")).encode(), 6)
    return prefix + base64.b64encode(packed).decode("ascii")


def unpack_message(message: str, prefix: str, kind: str) -> dict[str, Any]:
    """Read back a message made by :func:`pack_message` whose document has ``kind``.

    Raises:
        FormatError: it is not such a message, or it is damaged.
    """
    what = kind.rsplit(".", 1)[-1].replace("_", " ")
    if not message.startswith(prefix):
        raise FormatError(f"not a {what} message")
    try:
        packed = base64.b64decode(message[len(prefix):], validate=True)
        expanding = zlib.decompressobj()
        text = expanding.decompress(packed, MESSAGE_LIMIT)
        bomb = bool(expanding.unconsumed_tail)  # refused before it fills the memory
        document = None if bomb else json.loads(text)
    except (ValueError, zlib.error) as err:
        raise FormatError(f"a damaged {what} message ({err})") from err
    if bomb:
        raise FormatError(f"a {what} message that expands past {MESSAGE_LIMIT >> 20} MiB")
    if not isinstance(document, dict) or document.get("kind") != kind:
        raise FormatError(f"a {what} message that holds no {what} document")
    return document


def encode_calls(document: Mapping[str, Any]) -> str:
    """The range message that carries a calls document (see :data:`CALLS_MESSAGE_PREFIX`)."""
    return pack_message(CALLS_MESSAGE_PREFIX, document)


def decode_calls(message: str) -> dict[str, Any]:
    """Read back a message made by :func:`encode_calls`.

    Raises:
        FormatError: it is not such a message, or it is damaged.
    """
    return unpack_message(message, CALLS_MESSAGE_PREFIX, CALLS_KIND)


def child_files(directory: str | os.PathLike[str], name: str) -> dict[str, Path]:
    """The files of child ``name`` in a sweep's output directory, by role."""
    base = Path(directory)
    return {"report": base / f"{name}{REPORT_SUFFIX}", "result": base / f"{name}{RESULT_SUFFIX}",
            "status": base / f"{name}{STATUS_SUFFIX}", "log": base / f"{name}{LOG_SUFFIX}"}


def sweep_child(device: object | None = None) -> str:
    """A sweep child's name: ``sweep``, or ``sweep-gpu<device>`` per chosen GPU (characters
    other than letters and digits as ``_``)."""
    if device is None:
        return "sweep"
    return "sweep-gpu" + "".join(c if c.isalnum() else "_" for c in str(device))


def sweep_files(children: list[str]) -> list[str]:
    """What a sweep writes into its output directory, relative to it: the manifest, the
    saved profile, the job description and the files of each child in ``children``."""
    return [SWEEP_MANIFEST, PROFILE_FILE, SWEEP_JOB,
            *(path.name for name in children for path in child_files("", name).values())]


def timeline_trace(index: int) -> str:
    """The Chrome trace of a timeline's ``index``-th (variant, shape), before gzip."""
    return f"trace-{index}.json"


def timeline_files(count: int) -> list[str]:
    """What a timeline of ``count`` (variant, shape) pairs writes into its output directory,
    relative to it: the manifest and each trace (written plain, then gzip'd)."""
    return [TIMELINE_MANIFEST, *(timeline_trace(i) + end for i in range(count)
                                 for end in ("", ".gz"))]


def run_files(report: str | os.PathLike[str], *, ncu: bool = True) -> list[str]:
    """What a profiled command's run writes, replaces or removes beside ``report``, relative
    to its folder (glob patterns): the report, its run record, log, result and status; under
    ``ncu``, also the same of the ``--stalls`` pass and the launch list of
    ``--replicate-launches`` (a run without them removes an earlier one's)."""
    name = Path(Path(report).name)
    own = [name.name, *(name.with_suffix(end).name for end in
                        (RUN_SUFFIX, LOG_SUFFIX, RESULT_SUFFIX, STATUS_SUFFIX))]
    if not ncu:
        return own
    stalls = [f"{STALL_FOLDER}/{file}" for file in (*own, name.name + ".xz")]
    listed = [f"{LAUNCH_FOLDER}/{file}" for file in (LAUNCH_PLAN, TIMELINE_MANIFEST,
                                                     LAUNCH_STATUS, LAUNCH_TRACES)]
    return [*own, *stalls, *listed]


def write_json(path: str | os.PathLike[str], data: Mapping[str, Any]) -> None:
    """Write ``data`` to ``path`` atomically (a reader never sees half a file; see
    :func:`torch_nsight.files.atomic_output`)."""
    with atomic_output(path) as temp:
        temp.write_text(json.dumps(data, indent=1, default=str), encoding="utf-8")


def read_tagged(path: str | os.PathLike[str], kind: str, newest: int) -> dict[str, Any]:
    """Read a JSON file written with a ``kind`` and ``format`` tag.

    Raises:
        FormatError: the file is not JSON, not of ``kind``, or of a format newer than
            ``newest``.
    """
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except RecursionError:
        raise FormatError(f"{path} is not a readable JSON file (nested too deeply)") from None
    except (OSError, ValueError) as err:  # UnicodeDecodeError, JSONDecodeError
        raise FormatError(f"{path} is not a readable JSON file ({err})") from err
    if not isinstance(data, dict) or data.get("kind") != kind:
        raise FormatError(f"{path} is not a {kind} file")
    version = data.get("format", 0)
    if whole(version) is None:
        raise FormatError(f"{path} has format {str(version)[:40]!r}, not a format number: the "
                          "file is damaged")
    if version > newest:
        raise FormatError(f"{path} has format {str(version)[:40]}, newer than this version "
                          f"of torch_nsight reads ({newest}): upgrade torch_nsight")
    return data


def stall_report_of(report: str | os.PathLike[str]) -> Path:
    """Where the focused second pass of ``report`` is (:data:`STALL_FOLDER`), whatever the
    report's suffix (``.ncu-rep`` or ``.ncu-rep.xz``): the same file name in that folder."""
    path = Path(report)
    return path.parent / STALL_FOLDER / path.name


def launch_plan_of(report: str | os.PathLike[str]) -> Path:
    """Where the launch plan of ``report`` is (:data:`LAUNCH_FOLDER`), whatever its suffix."""
    return Path(report).parent / LAUNCH_FOLDER / LAUNCH_PLAN


def is_sweep_dir(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is a folder holding a sweep manifest."""
    return (Path(path) / SWEEP_MANIFEST).is_file()


def is_timeline_dir(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is a folder holding a timeline manifest."""
    return (Path(path) / TIMELINE_MANIFEST).is_file()


def is_trace(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is named like a Chrome trace of PyTorch's profiler (and is not one of
    torch_nsight's own JSON files)."""
    name = Path(path).name
    return (name.endswith(TRACE_SUFFIXES) and not name.endswith(CALLS_SUFFIX)
            and name not in (SWEEP_MANIFEST, TIMELINE_MANIFEST)
            and not name.endswith((".result.json", ".status.json", RUN_SUFFIX)))
