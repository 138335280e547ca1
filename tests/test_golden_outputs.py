"""What torch_nsight shows a user, on every recorded source in tests/data, against golden text
in tests/data/golden/ (issue 35: a refactor of the collection engine must leave every table,
finding, manifest and golden output identical on every source).

Each source is loaded once, as ``torch-nsight report`` loads it; the command line's ``main``
then prints each of its tables in this process (its ``load`` handed the profile already read,
with the warnings of reading it logged again), and the profile's metadata, notebook HTML,
finding rows and the data behind its plots are written as text. ``compare`` runs on pairs of
sources of one model. Every output is one file, ``tests/data/golden/<source>/<output>``;
tests/data/golden/README.md lists them, says which sources are left out and why, and how the
files are made: ``TORCH_NSIGHT_REGEN_GOLDEN=1`` rewrites them from the recordings, and a
change there is read by eye before it is committed.
"""

from __future__ import annotations

import contextlib
import csv
import dataclasses
import hashlib
import io
import json
import logging
import math
import os
import re
import shlex
import shutil
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

import torch_nsight.demo
import torch_nsight.loading
import torch_nsight.render.notebook  # noqa: F401 - registers the Profile's notebook HTML
from tests.golden import REGENERATE, diff_against_golden
from torch_nsight.analyze import has_ranks
from torch_nsight.cli.main import main
from torch_nsight.cli.text import log_handler
from torch_nsight.errors import TorchNsightError
from torch_nsight.profile import Profile
from torch_nsight.record import ProfileMeta
from torch_nsight.render import timeline_frame
from torch_nsight.render.roofline_plot import compute_roofs, placeable, raise_unplaceable
from torch_nsight.render.scaling import scaling_frame
from torch_nsight.report.cache import CACHE_SUFFIX

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data"
GOLDEN = DATA / "golden"
#: The demo's recording ships in the package; tests/data/README.md lists it with the others.
DEMO = Path(torch_nsight.demo.__file__).with_name(torch_nsight.demo.RECORDED_REPORT)
#: Launches printed as text; the whole kernel table is pinned by ``launches.csv.digest``.
FIRST_LAUNCHES = "40"


# --- comparing with the golden files ------------------------------------------------------

def check_all(outputs: dict[str, str], folder: str | None = None) -> None:
    """Fail with every output (golden name -> text) that differs from its golden file, and
    with any golden file in ``folder`` that no output has (removed when regenerating)."""
    problems = [p for name, text in outputs.items()
                if (p := diff_against_golden(name, text, GOLDEN)) is not None]
    if folder is not None and (GOLDEN / folder).is_dir():
        for path in sorted((GOLDEN / folder).iterdir()):
            if f"{folder}/{path.name}" in outputs:
                continue
            if REGENERATE:
                path.unlink()
            else:
                problems.append(f"{folder}/{path.name}: a golden file of no output")
    assert not problems, "\n".join(problems)


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


def _relative(path: Path) -> str:
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
    sources = [Source(_relative(f), _folder_kind(f)) for f in sorted(folders)]
    for path in walked:
        if path.name.endswith(".ncu-rep.xz"):
            kind = "report in a sweep folder" if path.parent in folders else "report"
        elif path.name.endswith(".parquet"):
            kind = "saved profile"
        elif path.name.endswith(".json.gz"):
            kind = "trace"
        else:
            continue
        sources.append(Source(_relative(path), kind))
    sources += [Source("ddp_nccl", "rank reports"), Source(_relative(DEMO), "demo")]
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
#: ``compare`` options -> the golden file's suffix.
COMPARE_OUTPUTS = {(): ".txt", ("--by", "kernel"): ".by_kernel.txt",
                   ("--format", "csv"): ".csv.digest"}


def _pair_name(pair: tuple[str, str]) -> str:
    return "--".join(Source(path, "").name for path in pair)


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


def _read_once(paths: Any, *, labels: Sequence[str] | None = None, **options: Any) -> Profile:
    """``load`` for the command line: a source read before is handed back, the warnings of
    reading it logged again (read as :func:`load` reads it, whatever the cache options)."""
    single = [paths] if isinstance(paths, (str, os.PathLike)) else list(paths)
    if len(single) != 1 or labels is not None:
        return READ(paths, labels=labels, **options)
    loaded = load(_relative((DATA / Path(single[0])).resolve()))
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
        patch.setattr(torch_nsight.loading, "load", _read_once)
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


def cli_digest(argv: list[str]) -> str:
    """What ``torch-nsight ARGV`` prints, its csv on standard output as :func:`digest_csv`."""
    head, out, err = run_cli(argv)
    return f"{head}--- standard output\n{digest_csv(out)}--- standard error\n{err}"


# --- outputs as text ----------------------------------------------------------------------

def _hash(values: Sequence[str]) -> str:
    return hashlib.sha256("\x1f".join(values).encode("utf-8")).hexdigest()[:16]


def digest_csv(text: str) -> str:
    """A csv too long to keep whole (thousands of rows of tens of columns), as text that
    changes with any of its characters: its size, then a line per column with its number of
    empty cells and a hash of its cells in row order (the hashes of one column and of the
    whole say what changed, not where)."""
    rows = list(csv.reader(io.StringIO(text)))
    if not rows:
        return "(empty)\n"
    header, cells = rows[0], rows[1:]
    columns = list(zip(*cells, strict=True)) if cells else [() for _ in header]
    lines = [f"{len(cells)} rows x {len(header)} columns; sha256 of the whole "
             f"{_hash([text])}; of each column's cells:"]
    lines += [f"{name}: {sum(1 for v in values if v == '')} empty, {_hash(values)}"
              for name, values in zip(header, columns, strict=True)]
    return "\n".join(lines) + "\n"


def _csv(frame: pd.DataFrame) -> str:
    return frame.to_csv(index=False, lineterminator="\n")


def _cell(value: object) -> str:
    """A cell exactly: floats by ``repr`` (every digit), missing values as ``None``."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "None"
    return repr(value)


def finding_table_text(profile: Profile) -> str:
    """Both finding tables (one row per block, then folded), a cell a line: every row,
    evidence and gain."""
    lines = []
    for fold in (False, True):
        table = profile.finding_table(fold)
        lines.append(f"== fold={fold}: {len(table)} rows, columns {list(table.columns)}")
        for number, row in enumerate(table.to_dict("records")):
            lines.append(f"-- row {number}")
            lines += [f"{name}: {_cell(value)}" for name, value in row.items()]
    return "\n".join(lines) + "\n"


def _volatile_out(value: Any) -> Any:
    """``value`` without the installed reader's version (a fact of this machine, not of the
    recording)."""
    if isinstance(value, dict):
        return {k: "<installed ncu_report>" if k == "reader_version" and v else _volatile_out(v)
                for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_volatile_out(v) for v in value]
    return value


def _columns(frame: pd.DataFrame | None) -> list[str] | None:
    """The names of a table's columns, in order (not their dtypes: pandas' own, ``str`` or
    ``object`` for text as pandas' version and the report cache have it)."""
    return None if frame is None else [str(column) for column in frame.columns]


def _coverage(profile: Profile) -> float | str:
    try:
        return profile.coverage
    except TorchNsightError as err:
        return f"{type(err).__name__}: {err}"


def profile_json(profile: Profile) -> str:
    """What the profile says of itself: its description, the counts derived from its tables,
    its metadata (sources, sweep and timeline manifests, PyTorch settings; without the time
    it was read) and the columns of its tables."""
    meta = profile.meta.to_dict()
    meta.pop("created")  # when it was read
    document = {
        "describe": profile.describe(), "repr": repr(profile), "shapes": profile.shapes,
        "variants": profile.variants, "gpus": profile.gpus,
        "metric_sets": profile.metric_sets, "coverage": _coverage(profile),
        "basis_counts": profile.basis_counts, "replicated_rows": profile.replicated_rows,
        "shallow_rows": profile.shallow_rows, "notes": profile.notes,
        "failures": profile.failures, "meta": _volatile_out(meta),
        "kernel_columns": _columns(profile.kernels), "calls_columns": _columns(profile.calls),
        "timeline_columns": _columns(profile.timeline),
    }
    return json.dumps(document, indent=1, ensure_ascii=False) + "\n"


def roofline_text(profile: Profile) -> str:
    """What the roofline plot draws: its compute roofs and how many kernels it places, or
    why it places none."""
    try:
        raise_unplaceable(profile)
    except TorchNsightError as err:
        return f"{type(err).__name__}: {err}\n"
    lines = [f"roof {'+'.join(key)}: {peak!r} FLOP/s"
             for key, peak in compute_roofs(profile.kernels).items()]
    lines.append(f"placed: {int(placeable(profile.kernels).sum())} of "
                 f"{len(profile.kernels)} kernels")
    return "\n".join(lines) + "\n"


def timeline_plot_text(profile: Profile) -> str:
    """The kernels the timeline plot draws (the median step) of each (variant, shape)."""
    assert profile.timeline is not None
    steps = profile.timeline[profile.timeline["kind"] == "step"]
    parts = []
    for variant, shape in steps[["variant", "shape"]].astype(object).drop_duplicates() \
            .itertuples(index=False):
        variant = variant if isinstance(variant, str) and variant else None
        shape = shape if isinstance(shape, str) else None
        parts.append(f"== variant {variant}, shape {shape}\n")
        try:
            parts.append(digest_csv(_csv(timeline_frame(profile, shape=shape,
                                                        variant=variant))))
        except ValueError as err:
            parts.append(f"ValueError: {err}\n")
    return "".join(parts)


def _command(*argv: str, digest: bool = False) -> Callable[[Source, Profile], str]:
    """An output: ``torch-nsight`` with ``argv``, the source's path after the subcommand."""
    show = cli_digest if digest else cli_text
    return lambda source, profile: show([argv[0], source.path, *argv[1:]])


def _always(profile: Profile) -> bool:
    return True


#: Output -> (whether a profile has it, its text). Tables of hundreds of rows are kept
#: whole; the kernel, calls and timeline tables (thousands of rows) as digests.
OUTPUTS: dict[str, tuple[Callable[[Profile], bool], Callable[[Source, Profile], str]]] = {
    "profile.json": (_always, lambda source, profile: profile_json(profile)),
    "report.txt": (_always, _command("report")),
    "modules.txt": (_always, _command("report", "--by", "module")),
    "kernel_names.txt": (_always, _command("report", "--by", "kernel_name")),
    "shapes.txt": (_always, _command("report", "--by", "shape")),
    "launches.txt": (_always, _command("report", "--by", "launch", "--top", FIRST_LAUNCHES)),
    "launches.csv.digest": (_always, _command("report", "--by", "launch", "--format", "csv",
                                              digest=True)),
    "ranks.txt": (lambda profile: has_ranks(profile.kernels), _command("report", "--by", "rank")),
    "findings.txt": (_always, _command("findings")),
    "findings.md": (_always, _command("findings", "--format", "markdown")),
    "finding_table.txt": (_always, lambda source, profile: finding_table_text(profile)),
    "notebook.html": (_always, lambda source, profile: profile._repr_html_() or ""),
    "roofline.txt": (_always, lambda source, profile: roofline_text(profile)),
    "scaling.csv": (lambda profile: len(profile.shapes) > 1 or len(profile.variants) > 1,
                    lambda source, profile: _csv(scaling_frame(profile))),
    "timeline_plot.csv.digest": (lambda profile: profile.timeline is not None,
                                 lambda source, profile: timeline_plot_text(profile)),
    "timeline.csv.digest": (lambda profile: profile.timeline is not None,
                            lambda source, profile: digest_csv(_csv(profile.timeline))),
    "calls.csv.digest": (lambda profile: profile.calls is not None,
                         lambda source, profile: digest_csv(_csv(profile.calls))),
}


def source_outputs(source: Source) -> dict[str, str]:
    """Every output of ``source``: golden name -> text."""
    loaded = load(source.path)
    if loaded.profile is None:  # what the user sees is the error
        return {f"{source.name}/report.txt": cli_text(["report", source.path])}
    outputs = {f"{source.name}/{name}": render(source, loaded.profile)
               for name, (has, render) in OUTPUTS.items() if has(loaded.profile)}
    if source.kind == "demo":
        outputs[f"{source.name}/demo.txt"] = cli_text(["demo", "--recorded"])
    return outputs


def check_portable(outputs: dict[str, str]) -> None:
    """Fail where an output names this checkout's folder: its golden file would hold only
    in a checkout at the same place."""
    named = [name for name, text in outputs.items() if str(ROOT) in text]
    assert not named, f"outputs naming {ROOT}: {named}"


# --- the tests ----------------------------------------------------------------------------

def test_every_kind_of_source_is_read() -> None:
    assert {s.kind for s in SOURCES} == {
        "sweep", "focused sweep", "timeline", "report", "report in a sweep folder",
        "saved profile", "trace", "rank reports", "demo"}
    assert len({s.name for s in SOURCES}) == len(SOURCES), "two sources share a folder"
    gone = DUPLICATES - {_relative(p) for p in DATA.rglob("*")}
    assert not gone, f"left-out sources that are gone: {sorted(gone)}"
    check_all({"SOURCES.txt": "".join(f"{s.name}: {s.kind}: {s.path}\n" for s in SOURCES)})


def test_no_golden_folder_is_left_over() -> None:
    names = {s.name for s in SOURCES} | {"compare"}
    left = sorted(p for p in GOLDEN.iterdir() if p.is_dir() and p.name not in names)
    if REGENERATE:
        for folder in left:
            shutil.rmtree(folder)
    else:
        assert not [p.name for p in left], "golden folders of no source"


#: The outputs a terminal shows: each line fits the 120 columns they are rendered for (the
#: 80-column check is tests/test_text_widths.py's).
TERMINAL_TEXTS = ("report.txt", "modules.txt", "kernel_names.txt", "shapes.txt",
                  "launches.txt", "ranks.txt", "findings.txt", "demo.txt")


@pytest.mark.parametrize("source", per_source(SOURCES))
def test_outputs_unchanged(source: Source) -> None:
    outputs = source_outputs(source)
    check_portable(outputs)
    check_fits_120(outputs, TERMINAL_TEXTS)
    check_all(outputs, source.name)


def check_fits_120(outputs: dict[str, str], names: tuple[str, ...] | None = None) -> None:
    """Every line of the outputs ``names`` (all when None) but the command's two head lines
    fits the 120 columns the goldens are rendered for."""
    too_wide = [f"{name}: {line!r}" for name, text in outputs.items()
                if names is None or name.rsplit("/", 1)[-1] in names
                for line in text.splitlines()[2:] if len(line) > 120]
    assert not too_wide, "\n".join(too_wide[:10])


@pytest.mark.parametrize("pair", PAIRS, ids=" vs ".join)
def test_compare_unchanged(pair: tuple[str, str]) -> None:
    name = f"compare/{_pair_name(pair)}"
    outputs = {f"{name}{suffix}": (cli_digest if "csv" in options else cli_text)(
        ["compare", *pair, *options]) for options, suffix in COMPARE_OUTPUTS.items()}
    check_portable(outputs)
    check_fits_120({k: v for k, v in outputs.items() if not k.endswith(".digest")})
    check_all(outputs)


def test_no_compare_is_left_over() -> None:
    names = {f"{_pair_name(pair)}{suffix}" for pair in PAIRS
             for suffix in COMPARE_OUTPUTS.values()}
    left = sorted(p for p in (GOLDEN / "compare").glob("*") if p.name not in names)
    if REGENERATE:
        for path in left:
            path.unlink()
    else:
        assert not [p.name for p in left], "golden files of no pair"


def test_one_changed_digit_fails() -> None:
    """One digit changed in an output fails its comparison: in a table kept whole (the
    difference shows the line) and in a csv kept as a digest (its column's hash changes)."""
    name, text = "findings_gemm/report.txt", cli_text(["report", "findings_gemm"])
    assert diff_against_golden(name, text, GOLDEN) is None
    time = text.index(" µs", text.index("--- standard output"))  # the table's header
    digit = next(i for i in range(time, len(text)) if text[i].isdigit())  # row 1's time
    changed = f"{text[:digit]}{(int(text[digit]) + 1) % 10}{text[digit + 1:]}"
    line = changed[changed.rindex("\n", 0, digit) + 1:changed.index("\n", digit)]
    difference = diff_against_golden(name, changed, GOLDEN, regenerate=False)
    assert difference is not None and f"\n+{line}\n" in difference

    argv = ["report", "findings_gemm", "--by", "launch", "--format", "csv"]
    rows = list(csv.reader(io.StringIO(run_cli(argv)[1])))
    column = rows[0].index("duration_ns")
    value = rows[1][column]
    last = max(i for i, c in enumerate(value) if c.isdigit())
    changed_rows = [list(row) for row in rows]
    changed_rows[1][column] = f"{value[:last]}{(int(value[last]) + 1) % 10}{value[last + 1:]}"
    before, after = (digest_csv(_written(r)).splitlines() for r in (rows, changed_rows))
    assert [b.split(":")[0] for b, a in zip(before, after, strict=True) if b != a] \
        == [before[0].split(":")[0], "duration_ns"]
    digest = cli_digest(argv).replace(digest_csv(_written(rows)), "\n".join(after) + "\n")
    name = "findings_gemm/launches.csv.digest"
    assert diff_against_golden(name, cli_digest(argv), GOLDEN, regenerate=False) is None
    assert "+duration_ns: " in str(diff_against_golden(name, digest, GOLDEN, regenerate=False))


def _written(rows: list[list[str]]) -> str:
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerows(rows)
    return out.getvalue()
