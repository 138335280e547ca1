"""The API's tables keep their columns: ``Profile.hotspots()``, ``modules()`` and
``findings()`` hold every documented column, in the documented order, over recorded
sources that differ in what they tell (one run or ten, shapes or none, variants, a
timeline without roofline, a report without findings); docs/api.md lists exactly them."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pandas as pd
import pytest

import torch_nsight.demo
import torch_nsight.render.finding_words  # noqa: F401  (registers the findings' words)
from torch_nsight.loading import load
from torch_nsight.profile import Profile
from torch_nsight.vocabulary import (
    PROFILE_FINDING_COLUMNS,
    PROFILE_HOTSPOT_COLUMNS,
    PROFILE_MODULE_COLUMNS,
    PROFILE_MODULE_HOTSPOT_COLUMNS,
)

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data"
#: one shape and one run; variants; several runs; a timeline (no roofline); NCCL, no finding
SOURCES = {
    "demo": Path(torch_nsight.demo.__file__).parent / torch_nsight.demo.RECORDED_REPORT,
    "variants": DATA / "findings_gemm",
    "runs": DATA / "runs" / "gpt2_runs10",
    "timeline": DATA / "timeline_train",
    "nccl": DATA / "ddp_nccl",
}

#: (public call, the full table it shows, its documented columns)
Call = tuple[Callable[[Profile], pd.DataFrame], Callable[[Profile], pd.DataFrame],
             tuple[str, ...]]
CALLS: dict[str, Call] = {
    "hotspots()": (lambda p: p.hotspots(n=50), lambda p: p.hotspot_table(n=50),
                   PROFILE_HOTSPOT_COLUMNS),
    "hotspots(fold=False)": (lambda p: p.hotspots(n=50, fold=False),
                             lambda p: p.hotspot_table(n=50, fold=False),
                             PROFILE_HOTSPOT_COLUMNS),
    "hotspots(level=module)": (lambda p: p.hotspots(n=50, level="module"),
                               lambda p: p.hotspot_table(n=50, level="module"),
                               PROFILE_MODULE_HOTSPOT_COLUMNS),
    "modules()": (lambda p: p.modules(), lambda p: p.module_table(), PROFILE_MODULE_COLUMNS),
    "modules(fold=True)": (lambda p: p.modules(fold=True), lambda p: p.module_table(fold=True),
                           PROFILE_MODULE_COLUMNS),
    "findings()": (lambda p: p.findings(), lambda p: p.finding_table(),
                   PROFILE_FINDING_COLUMNS),
    "findings(fold=False)": (lambda p: p.findings(fold=False),
                             lambda p: p.finding_table(fold=False), PROFILE_FINDING_COLUMNS),
}


@pytest.fixture(scope="module")
def profiles() -> dict[str, Profile]:
    return {name: load(path) for name, path in SOURCES.items()}


def test_the_sources_differ_in_what_they_tell(profiles: dict[str, Profile]) -> None:
    # otherwise the test below would prove nothing: a column empty in one source's rows
    # and full in another's, tables with rows and without
    hot = {name: p.hotspot_table(n=50) for name, p in profiles.items()}
    assert hot["demo"]["ci95_ns"].isna().all() and hot["runs"]["ci95_ns"].notna().all()
    assert hot["demo"]["variant"].isna().all() and hot["variants"]["variant"].notna().all()
    assert hot["timeline"]["bound"].isna().all() and hot["demo"]["bound"].notna().all()
    found = {name: p.finding_table() for name, p in profiles.items()}
    assert found["nccl"].empty and not found["demo"].empty


@pytest.mark.parametrize("call", list(CALLS))
def test_every_documented_column_whatever_the_source(profiles: dict[str, Profile],
                                                     call: str) -> None:
    public, full, columns = CALLS[call]
    for name, profile in profiles.items():
        table, whole = public(profile), full(profile)
        assert list(table.columns) == list(columns), (name, call)
        # nothing the analysis computes is lost, and the rows are the analysis' rows
        assert set(whole.columns) <= set(columns), (name, call, set(whole.columns) - set(columns))
        assert len(table) == len(whole), (name, call)
        for column in whole.columns:
            pd.testing.assert_series_equal(table[column], whole[column], obj=f"{name} {call}")


def test_a_column_the_source_does_not_tell_is_empty_not_missing(
        profiles: dict[str, Profile]) -> None:
    demo, runs = profiles["demo"], profiles["runs"]
    assert demo.variants == [] and demo.hotspots()["variant"].isna().all()
    assert demo.hotspots()["ci95_ns"].isna().all()
    assert runs.hotspots()["ci95_ns"].notna().all()
    assert profiles["timeline"].hotspots()["headroom_ns"].isna().all()
    unfolded = demo.hotspots(fold=False)
    assert (unfolded["blocks"] == 1).all()  # each row one block


def _documented(page: Path, heading: str) -> list[str]:
    """The column names of the table under ``heading`` in ``page``: each row's first cell,
    every backticked name in it, in order."""
    text = page.read_text(encoding="utf-8")
    start = text.index(f"\n{heading}\n")
    end = text.find("\n## ", start + 1)
    names: list[str] = []
    for line in text[start:end if end > 0 else None].splitlines():
        cells = line.split("|")
        if len(cells) > 2 and cells[1].strip() not in ("column", "---"):
            names += re.findall(r"`([a-z0-9_]+)`", cells[1])
    return names


@pytest.mark.parametrize(("heading", "columns"), [
    ("## `Profile.hotspots()`", PROFILE_HOTSPOT_COLUMNS),
    ("## `Profile.modules()`", PROFILE_MODULE_COLUMNS),
    ('## `Profile.hotspots(level="module")`', PROFILE_MODULE_HOTSPOT_COLUMNS),
    ("## `Profile.findings()`", PROFILE_FINDING_COLUMNS),
])
def test_the_docs_list_exactly_the_columns_in_order(heading: str,
                                                    columns: tuple[str, ...]) -> None:
    assert _documented(ROOT / "docs" / "api.md", heading) == list(columns)


def test_the_findings_page_explains_every_column() -> None:
    explained = _documented(ROOT / "docs" / "findings.md", "## Columns")
    assert sorted(explained) == sorted(PROFILE_FINDING_COLUMNS)
