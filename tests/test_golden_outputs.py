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

import csv
import hashlib
import io
import json
import math
import shutil
from collections.abc import Callable, Sequence
from typing import Any

import pandas as pd
import pytest

import torch_nsight.render.notebook  # noqa: F401 - registers the Profile's notebook HTML
from tests.golden import REGENERATE, diff_against_golden
from tests.golden_sources import (
    DATA,
    DUPLICATES,
    GOLDEN,
    PAIRS,
    ROOT,
    SOURCES,
    Source,
    cli_text,
    load,
    per_pair,
    per_source,
    relative_to_data,
    run_cli,
)
from torch_nsight.analyze import has_ranks
from torch_nsight.errors import TorchNsightError
from torch_nsight.profile import Profile
from torch_nsight.render import timeline_frame
from torch_nsight.render.roofline_plot import compute_roofs, placeable, raise_unplaceable
from torch_nsight.render.scaling import scaling_frame

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


#: ``compare`` options -> the golden file's suffix.
COMPARE_OUTPUTS = {(): ".txt", ("--by", "kernel"): ".by_kernel.txt",
                   ("--format", "csv"): ".csv.digest"}


def _pair_name(pair: tuple[str, str]) -> str:
    return "--".join(Source(path, "").name for path in pair)


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
    gone = DUPLICATES - {relative_to_data(p) for p in DATA.rglob("*")}
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


@pytest.mark.parametrize("pair", per_pair(PAIRS))
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
