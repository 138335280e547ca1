"""The input fuzz (issue 45), a seeded subset: damaged saved profiles, report caches, sweep
and timeline manifests, calls files, traces and raw reports (tests/report/fuzz_inputs.py)
each load or fail with the library's error, and what a loaded one prints holds no raw
control character and no formula cell. ``TORCH_NSIGHT_FUZZ_CASES=N`` runs N cases per kind
(bench/fuzz_inputs.py runs the full 5,000), ``TORCH_NSIGHT_FUZZ_SEED`` another seed.

The regression cases below are what the fuzz found, one test each.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import torch_nsight
from tests.report.fuzz_inputs import (
    DATA,
    MAKERS,
    SEED,
    USES,
    Seeds,
    formula_cells,
    raw_characters,
    run_case,
    use_case,
)
from torch_nsight.errors import ReportError

#: Cases per kind in the suite: about 15 s on a busy 2-core machine.
CASES = int(os.environ.get("TORCH_NSIGHT_FUZZ_CASES", "8"))


@pytest.fixture(scope="module")
def seeds(tmp_path_factory: pytest.TempPathFactory) -> Seeds:
    return Seeds(tmp_path_factory.mktemp("fuzz-inputs"))


@pytest.mark.parametrize("kind", sorted(MAKERS))
def test_damaged_inputs_load_or_are_refused_and_print_nothing_raw(seeds: Seeds,
                                                                  kind: str) -> None:
    seed = int(os.environ.get("TORCH_NSIGHT_FUZZ_SEED", SEED))
    outcomes = [run_case(seeds, kind, index, seed) for index in range(CASES)]
    failed = [f"case {o.case} (TORCH_NSIGHT_FUZZ_SEED={seed}): {o.ending}\n"
              + "\n".join(o.problems) for o in outcomes if o.problems]
    assert not failed, f"{len(failed)} of {len(outcomes)} failed:\n" + "\n".join(failed[:3])
    assert {o.ending for o in outcomes} <= {"loaded", "refused"}


@pytest.mark.parametrize("index", [112, 781, 809, 901, 925])
def test_the_saved_cases_the_full_run_found(seeds: Seeds, index: int) -> None:
    """The full run's failures of 2026-11-28 (``bench/fuzz_inputs.py``, the seed
    :data:`SEED`): a flag column of a saved profile made the hotspot words raise (112); a
    precision name with control characters reached an SVG id (781, 809) and, drawn as a tick
    label the axes make only when drawn, matplotlib's missing-glyph warning on stderr (901,
    925)."""
    outcome = run_case(seeds, "saved", index)
    assert not outcome.problems, "\n".join(outcome.problems)
    assert outcome.ending in ("loaded", "refused")


def test_the_checks_see_raw_characters_and_formulas() -> None:
    assert raw_characters("a\x1b[2Jb", "stdout") and raw_characters("x\u202ey", "log")
    assert raw_characters("\x9b31m", "stderr") and raw_characters("cr\rhere", "stdout")
    assert not raw_characters("a table\n\twith tabs and \\x1b escaped", "stdout")
    assert formula_cells('module\n=HYPERLINK("x")\n', "modules")
    assert formula_cells("a,@SUM(A1)\n", "hotspots") and formula_cells("+1+2\n", "hotspots")
    assert not formula_cells("-1.5,+3,1e9,-inf,'=HYPERLINK(x)\n", "hotspots")


def test_a_traceback_is_a_failed_case(seeds: Seeds, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*args: object, **kwargs: object) -> None:
        raise KeyError("duration_ns")

    monkeypatch.setattr(torch_nsight, "load", broken)
    outcome = run_case(seeds, "trace", 0)
    assert outcome.ending == "failed" and "KeyError" in outcome.problems[0]


def test_a_case_is_rebuilt_from_its_seed(seeds: Seeds, tmp_path: Path) -> None:
    import random

    made = []
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        path = MAKERS["saved"](seeds, random.Random(f"{SEED}:saved:3"), tmp_path / name)
        made.append(pq.read_table(path))
    assert made[0].equals(made[1])


@pytest.mark.parametrize("use", range(len(USES)))
def test_each_use_reaches_its_output(seeds: Seeds, tmp_path: Path, use: int,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    """A use of a clean input writes what it is for: the harness checks real output."""
    timeline = seeds.shared("use-timeline", DATA / "graph_captured_timeline")
    kind, path = ("trace", timeline) if USES[use] == "timeline" else ("saved", seeds.report)
    written = use_case(seeds, kind, use, path, seeds.cache_dir, tmp_path)
    out, err = capsys.readouterr()
    if USES[use] == "outputs":
        assert {"table.csv", "table.json"} <= set(written)
        assert "kernel" in written["table.csv"].splitlines()[0]
    elif USES[use] == "plot":
        assert "roofline.svg" in written and "wrote" in out
    elif USES[use] == "compare":
        assert "modules compared" in out and err == ""
    else:
        assert any(name.startswith("timeline-") for name in written)


# --- what the fuzz found -------------------------------------------------------------------

def _edited(seeds: Seeds, tmp_path: Path, column: str, values: list[object] | None = None,
            meta: dict[str, object] | None = None) -> Path:
    table = pq.read_table(seeds.saved[1])  # a report's, as Profile.save writes it
    if values is not None:
        assert column in table.column_names
        rows = table.num_rows
        table = table.set_column(table.schema.get_field_index(column), column,
                                 pa.array((values * rows)[:rows]))
    if meta is not None:
        stored = dict(table.schema.metadata)
        header = json.loads(stored[b"torch_nsight.profile"])
        header["meta"]["sources"][0].update(meta)
        stored[b"torch_nsight.profile"] = json.dumps(header).encode()
        table = table.replace_schema_metadata(stored)
    path = tmp_path / "edited.parquet"
    pq.write_table(table, path)
    return path


@pytest.mark.parametrize("column, values", [
    pytest.param("roof_time_ns", ["true"], id="text where numbers belong"),  # ValueError
    pytest.param("module_path", [True, False], id="flags where names belong"),  # fold
    pytest.param("flops_complete", ["=1+1"], id="text where flags belong"),
])
def test_a_saved_column_of_another_kind_is_refused(seeds: Seeds, tmp_path: Path, column: str,
                                                   values: list[object]) -> None:
    with pytest.raises(ReportError, match=f"column '{column}' holds values that are not"):
        torch_nsight.load(_edited(seeds, tmp_path, column, values))


@pytest.mark.parametrize("meta", [
    pytest.param({"gpu": ["NVIDIA H200", 1.5]}, id="a number as a GPU"),  # TypeError
    pytest.param({"path": 7}, id="a number as a path"),
    pytest.param({"has_module_ranges": "yes"}, id="text as a flag"),
])
def test_saved_metadata_of_other_types_is_refused(seeds: Seeds, tmp_path: Path,
                                                  meta: dict[str, object]) -> None:
    with pytest.raises(ReportError, match="does not hold a profile's metadata"):
        torch_nsight.load(_edited(seeds, tmp_path, "gpu", meta=meta))


def test_a_saved_traces_copy_sizes_as_text_are_refused(seeds: Seeds, tmp_path: Path) -> None:
    # ValueError in the timeline's step table (steps._activity) before
    table = pq.read_table(seeds.saved[0])  # a trace's, with its copies' bytes
    index = table.schema.get_field_index("bytes")
    assert index >= 0
    table = table.set_column(index, "bytes", pa.array(["false"] * table.num_rows))
    pq.write_table(table, tmp_path / "edited.parquet")
    with pytest.raises(ReportError, match="column 'bytes' holds values that are not numbers"):
        torch_nsight.load(tmp_path / "edited.parquet")


def test_format_one_metadata_of_other_types_is_refused(tmp_path: Path) -> None:
    # TypeError in describe before: a GPU named by a mapping in an old file's metadata
    table = pq.read_table(Path(__file__).resolve().parents[1] / "data"
                          / "profile_format1.parquet")
    stored = dict(table.schema.metadata)
    header = json.loads(stored[b"torch_nsight.profile"])
    header["meta"]["gpu"] = ["NVIDIA H100", {"name": "\x1b[2J"}]
    stored[b"torch_nsight.profile"] = json.dumps(header).encode()
    pq.write_table(table.replace_schema_metadata(stored), tmp_path / "old.parquet")
    with pytest.raises(ReportError, match="does not hold a profile's metadata"):
        torch_nsight.load(tmp_path / "old.parquet")


def test_names_drawn_in_a_plot_hold_no_raw_character(seeds: Seeds, tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]
                                                     ) -> None:
    # seed 45, case saved:61: matplotlib warned "Glyph 0 (\x00) missing from font(s)" on
    # standard error, raw, for a module name holding NUL drawn in the roofline's legend
    import warnings

    from tests.report.fuzz_inputs import RAW
    from torch_nsight.cli.main import main

    table = pq.read_table(seeds.saved[1])
    paths = table.column("module_path").to_pylist()
    hostile = [None if p is None else "nul\x00\x1b[2J" + p for p in paths]
    table = table.set_column(table.schema.get_field_index("module_path"), "module_path",
                             pa.array(hostile, table.schema.field("module_path").type))
    pq.write_table(table, tmp_path / "names.parquet")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert main(["report", str(tmp_path / "names.parquet"), "--plot",
                     str(tmp_path / "roofline.svg")]) == 0
    out, err = capsys.readouterr()
    drawn = (tmp_path / "roofline.svg").read_text()
    assert "nul\\x00\\x1b[2J" in drawn  # escaped, as every other output shows it
    for text in (out, err, drawn, *(str(w.message) for w in caught)):
        assert not RAW.search(text)
