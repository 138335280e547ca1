"""The recorded sources of tests/data as the golden tests read them (tests/test_golden_outputs.py),
each read once per test process, and the command line run on them in this process.

Every test that takes a source this way (the golden tests, tests/test_text_widths.py, and in
tests/analyze/ and tests/cli/ the fix, roofline and width checks of every source) imports it
from this module, under this one name: a worker then holds one memo of :func:`load` for all of
them, and the tests of one source (one xdist group, :func:`per_source`) read it once. Kept in a
test module, the memo was held twice: pytest imports tests/test_golden_outputs.py as
``test_golden_outputs``, and ``import tests.test_golden_outputs`` made a second module with a
memo of its own, so every source was read, and its findings computed, twice.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import logging
import os
import re
import shlex
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

import torch_nsight.demo
import torch_nsight.loading
from torch_nsight.cli.main import main
from torch_nsight.cli.text import log_handler
from torch_nsight.errors import TorchNsightError
from torch_nsight.profile import Profile
from torch_nsight.record import ProfileMeta
from torch_nsight.report.cache import CACHE_SUFFIX

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data"
GOLDEN = DATA / "golden"
#: The demo's recording ships in the package; tests/data/README.md lists it with the others.
DEMO = Path(torch_nsight.demo.__file__).with_name(torch_nsight.demo.RECORDED_REPORT)


# --- the sources --------------------------------------------------------------------------

@dataclass(frozen=True)
class Source:
    """A recorded source: its path as the commands are given it (relative to tests/data)
    and its kind."""

    path: str
    kind: str

    @property
    def name(self) -> str:
        """Its folder under tests/data/golden: the path with ``/`` as ``__`` and without its
        suffix (a folder named ``*.ncu-rep.xz`` would be a report to the walks of
        tests/data)."""
        name = self.path.removeprefix("../../").replace("/", "__")
        for suffix in (".ncu-rep.xz", ".parquet", ".json.gz"):
            name = name.removesuffix(suffix)
        return name


#: Sources read by other sources of their kind and long to read again: left out (the
#: README says the same).
DUPLICATES = {
    # a timeline folder's trace read alone: two small traces stand for the rest
    "timeline_train/trace-0.json.gz", "timeline_decode/trace-0.json.gz",
    "runs/timeline_runs/trace-0.json.gz", "compile/vit_timeline/trace.json.gz",
    "compile/reduce_overhead_timeline/trace.json.gz", "sweep_focused/timeline/trace-0.json.gz",
    # the report of a repeated-runs sweep read alone: nine other sweeps' reports are
    "runs/gpt2_runs_a/sweep.ncu-rep.xz", "runs/gpt2_runs_b/sweep.ncu-rep.xz",
    "runs/gpt2_runs_unpadded/sweep.ncu-rep.xz", "runs/gpt2_runs10/sweep.ncu-rep.xz",
    # the step with every launch profiled: its replicated twin, read with copies, stands for it
    "op_replicas/measured.ncu-rep.xz",
}


def relative_to_data(path: Path) -> str:
    """``path`` relative to tests/data, with ``/``."""
    return Path(os.path.relpath(path, DATA)).as_posix()


def _folder_kind(folder: Path) -> str:
    if (folder / "timeline.json").exists():
        return "timeline"
    manifest = json.loads((folder / "sweep.json").read_text(encoding="utf-8"))
    return "focused sweep" if manifest["record"]["options"].get("focus") else "sweep"


def find_sources() -> list[Source]:
    """Every source in tests/data, but :data:`DUPLICATES`: sweep, focused sweep and timeline
    folders; each report and saved profile (a sweep's own report too, read alone); each
    trace of a timeline read alone; the folder of a distributed run's rank reports; and the
    demo's recording."""
    walked = sorted(p for p in DATA.rglob("*")
                    if GOLDEN not in p.parents and not p.name.endswith(CACHE_SUFFIX))
    folders = {p.parent for p in walked if p.name in ("sweep.json", "timeline.json")}
    sources = [Source(relative_to_data(f), _folder_kind(f)) for f in sorted(folders)]
    for path in walked:
        if path.name.endswith(".ncu-rep.xz"):
            kind = "report in a sweep folder" if path.parent in folders else "report"
        elif path.name.endswith(".parquet"):
            kind = "saved profile"
        elif path.name.endswith(".json.gz"):
            kind = "trace"
        else:
            continue
        sources.append(Source(relative_to_data(path), kind))
    sources += [Source("ddp_nccl", "rank reports"), Source(relative_to_data(DEMO), "demo")]
    return sorted((s for s in sources if s.path not in DUPLICATES), key=lambda s: s.name)


SOURCES = find_sources()
#: Pairs of sources of one model for ``compare``: (baseline, current).
PAIRS = [
    ("runs/gpt2_runs_a", "runs/gpt2_runs_b"),  # the same sweep twice: noise only
    ("runs/gpt2_runs_a", "runs/gpt2_runs_unpadded"),  # lm_head's misaligned GEMM
    ("runs/gpt2_runs_a", "hf_gpt2_fast"),  # three runs against one
    ("findings_fp32_off", "findings_fp32_on"),  # TF32 turned on
    ("hand_s128.ncu-rep.xz", "hand_s512.ncu-rep.xz"),  # a longer sequence, unlabelled
    ("ddp_nccl/report-rank0.ncu-rep.xz", "ddp_nccl/report-rank1.ncu-rep.xz"),  # two ranks
    ("profile_fast/vit_profile.ncu-rep.xz",
     "profile_fast/vit_profile_replicated.ncu-rep.xz"),  # blocks profiled once
    ("decoder_train/fast.ncu-rep.xz", "decoder_train/duration.ncu-rep.xz"),  # metric sets
    ("compile/vit_timeline", "compile/reduce_overhead_timeline"),  # two timelines
    ("llama_block_sweep.ncu-rep.xz", "profile_format1.parquet"),  # saved: nothing changed
]


# --- each source read once, the command line run in this process ------------------------

@dataclass(frozen=True)
class Loaded:
    """A source's profile, or the error reading it gave, and the log records of reading it
    (what the command line prints on standard error while it reads)."""

    profile: Profile | None
    error: TorchNsightError | None
    records: tuple[logging.LogRecord, ...]


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@contextlib.contextmanager
def _torch_nsight_log(handler: logging.Handler) -> Iterator[None]:
    """torch_nsight's records at the command line's level (warnings) go to ``handler``
    alone: not to pytest's capture, nor twice."""
    logger = logging.getLogger("torch_nsight")
    level, propagate = logger.level, logger.propagate
    logger.setLevel(logging.WARNING)
    logger.propagate = False
    logger.addHandler(handler)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
        logger.propagate = propagate


@contextlib.contextmanager
def _in_data() -> Iterator[None]:
    """Work in tests/data, where the sources' paths start (no absolute path is printed)."""
    before = Path.cwd()
    os.chdir(DATA)
    try:
        yield
    finally:
        os.chdir(before)


READ = torch_nsight.loading.load


def per_source(sources: list[Source]) -> list[Any]:
    """``sources`` as test parameters, each in the xdist group of its path: with ``--dist
    loadgroup`` (pyproject's addopts) every test of one source (its golden outputs, its
    widths, its fixes) runs on one worker, one after the other, and reads the source once
    (:func:`load`)."""
    return [pytest.param(s, marks=pytest.mark.xdist_group(s.path),
                         id=s.path.removeprefix("../../")) for s in sources]


def per_pair(pairs: list[tuple[str, str]]) -> list[Any]:
    """``pairs`` as test parameters, each in an xdist group of its own, as :func:`per_source`
    does for one source: the tests of one pair (its golden comparisons, their widths) run on
    one worker, one after the other, and read its two sources once."""
    return [pytest.param(pair, marks=pytest.mark.xdist_group(" vs ".join(pair)),
                         id=" vs ".join(pair)) for pair in pairs]


@lru_cache(maxsize=4)  # a test's sources (two for compare), not every profile at once
def load(path: str) -> Loaded:
    """Read ``path`` (relative to tests/data) as ``report`` reads it the first time, once
    for all the commands of a test: from the recording, not from a report cache that another
    source's test may have written (the same rows, its text columns of another dtype)."""
    handler = _Records()
    with _torch_nsight_log(handler), _in_data():
        try:
            profile, error = portable_profile(READ([Path(path)], cache=False)), None
        except TorchNsightError as err:
            profile, error = None, err
    return Loaded(profile, error, tuple(handler.records))


#: This checkout's folder, as the readers write it at the head of the paths they resolve.
CHECKOUT = f"{ROOT}{os.sep}"
#: A recording's own stored path to tests/data, from whichever checkout recorded it.
RECORDED = re.compile(r"^/(?:[^/\s]+/)+tests/data/")


def _portable(value: Any) -> Any:
    """``value`` (a path, or a record holding some) with this checkout's folder written
    ``<repo>/``."""
    if isinstance(value, str):
        if value.startswith(CHECKOUT):
            return f"<repo>/{value[len(CHECKOUT):]}"
        # a path stored inside a recording, written where it was recorded
        return RECORDED.sub("<repo>/tests/data/", value, count=1)
    if isinstance(value, dict):
        return {key: _portable(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_portable(item) for item in value)
    return value


def _portable_frame(frame: pd.DataFrame | None) -> pd.DataFrame | None:
    if frame is None:
        return None
    frame = frame.copy()
    for column in frame.columns:
        if not (pd.api.types.is_object_dtype(frame[column])
                or pd.api.types.is_string_dtype(frame[column])):
            continue
        absolute = frame[column].map(lambda v: isinstance(v, str) and (v.startswith(CHECKOUT) or bool(RECORDED.match(v))))
        if absolute.any():
            frame.loc[absolute, column] = frame.loc[absolute, column].map(_portable)
    return frame


def portable_profile(profile: Profile) -> Profile:
    """``profile`` with this checkout's folder written ``<repo>/`` in the paths its readers
    resolved (the kernel, calls and timeline tables' ``source``, the metadata's paths), before
    anything is rendered: a line that names a path wraps at the same word in every checkout.
    The paths' order and grouping are kept (one prefix replaced by another)."""
    meta = profile.meta.to_dict()
    kept = ProfileMeta.from_dict(meta)
    assert kept.to_dict() == meta, "the metadata does not read back as it was"
    return dataclasses.replace(
        profile, kernels=_portable_frame(profile.kernels),
        calls=_portable_frame(profile.calls), timeline=_portable_frame(profile.timeline),
        meta=ProfileMeta.from_dict(_portable(meta)))


def read_once(paths: Any, *, labels: Sequence[str] | None = None, **options: Any) -> Profile:
    """``load`` for the command line: a source read before is handed back, the warnings of
    reading it logged again (read as :func:`load` reads it, whatever the cache options)."""
    single = [paths] if isinstance(paths, (str, os.PathLike)) else list(paths)
    if len(single) != 1 or labels is not None:
        return READ(paths, labels=labels, **options)
    loaded = load(relative_to_data((DATA / Path(single[0])).resolve()))
    for record in loaded.records:
        logging.getLogger(record.name).handle(record)
    if loaded.error is not None:
        raise loaded.error
    assert loaded.profile is not None
    return loaded.profile


def run_cli(argv: list[str]) -> tuple[str, str, str]:
    """Run ``torch-nsight ARGV`` in this process, in tests/data.

    Returns:
        The command and its exit status (a line each), its standard output and its standard
        error.
    """
    out, err = io.StringIO(), io.StringIO()
    with _in_data(), pytest.MonkeyPatch.context() as patch, contextlib.redirect_stdout(out), \
            contextlib.redirect_stderr(err), _torch_nsight_log(log_handler()):
        patch.setattr(torch_nsight.loading, "load", read_once)
        try:
            status: Any = main(argv)
        except SystemExit as exit_:  # argparse's usage errors
            status = exit_.code
    head = f"$ torch-nsight {shlex.join(argv)}\nexit status {status}\n"
    return head, out.getvalue(), err.getvalue()


def cli_text(argv: list[str]) -> str:
    """What ``torch-nsight ARGV`` prints, whole."""
    head, out, err = run_cli(argv)
    return f"{head}--- standard output\n{out}--- standard error\n{err}"
