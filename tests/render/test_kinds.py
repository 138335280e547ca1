"""One registry of table kinds: the renderers, the command line and docs/cli.md agree on it."""

from __future__ import annotations

import re
from pathlib import Path
from typing import get_args

import pytest

from torch_nsight.analyze.hotspots import HotspotOrder
from torch_nsight.cli.main import build_parser
from torch_nsight.profile import Profile
from torch_nsight.render import TABLE_KINDS, TABLES, render_table, table_frame, write_table
from torch_nsight.render.kinds import (
    DEFAULT_ROWS,
    GROUPINGS,
    HOTSPOT_ORDERS,
    TableKind,
)

DOCS = Path(__file__).resolve().parents[2] / "docs" / "cli.md"


def documented_groupings() -> list[str]:
    """The ``--by`` values named in the first column of docs/cli.md's ``--by`` table."""
    text = DOCS.read_text(encoding="utf-8")
    header = text.index("| `--by` |")
    rows = text[header:].split("\n\n", 1)[0].splitlines()[2:]
    return [re.match(r"\| `(\w+)`", row).group(1) for row in rows]


def test_docs_describe_every_registered_kind() -> None:
    assert [GROUPINGS[name] for name in documented_groupings()] == list(TABLES)


def test_docs_synopsis_lists_the_kinds() -> None:
    assert f"[--by {'|'.join(GROUPINGS)}]" in DOCS.read_text(encoding="utf-8")


def test_typing_matches_the_registry() -> None:
    assert get_args(TableKind) == TABLES == tuple(TABLE_KINDS)
    assert get_args(HotspotOrder) == HOTSPOT_ORDERS
    assert dict(DEFAULT_ROWS) == {"hotspots": 10, "modules": None, "kernel_names": None,
                                  "launches": None, "shapes": None, "ranks": None,
                                  "findings": 10}
    assert sorted(GROUPINGS.values()) == sorted(TABLES)


@pytest.mark.parametrize("command", ["report", "demo"])
def test_cli_choices_come_from_the_registry(command: str) -> None:
    parser = build_parser()
    subparsers = next(a for a in parser._actions if a.dest == "subcommand")
    options = {a.dest: a for a in subparsers.choices[command]._actions}
    assert tuple(options["by"].choices) == tuple(GROUPINGS)  # no former name
    assert tuple(options["sort"].choices) == HOTSPOT_ORDERS
    for name, table in GROUPINGS.items():
        assert f"{name}: {TABLE_KINDS[table].summary}" in options["by"].help


@pytest.mark.parametrize("what", [t for t in TABLES if t != "ranks"])
def test_every_kind_renders_its_default_rows(profile: Profile, what: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "1000")  # every column, no wrapping
    frame = table_frame(profile, what)
    expected = DEFAULT_ROWS[what]
    names = profile.kernels["kernel"].nunique()
    if what == "findings":  # the demo block has two findings, fewer than the default 10
        expected = len(profile.findings())
    assert len(frame) == (expected if expected is not None else
                          {"modules": 21, "kernel_names": names, "launches": 40,
                           "shapes": 1}[what])
    text = render_table(profile, what)
    assert len(text.splitlines()) == 1 + len(frame)  # plain: a header line, then the rows


def test_ranks_need_ranked_reports(profile: Profile) -> None:
    with pytest.raises(ValueError, match="report-rank<R>"):
        table_frame(profile, "ranks")


def test_unknown_kind(profile: Profile) -> None:
    with pytest.raises(ValueError, match="hotspots, modules, kernel_names, launches"):
        table_frame(profile, "roofs")  # type: ignore[arg-type]


@pytest.mark.parametrize("old", ["kernels", "kernel"])
def test_former_names_of_kernel_names_are_refused(profile: Profile, old: str,
                                                  tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="kernel_names"):
        render_table(profile, old, "github")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="kernel_names"):
        table_frame(profile, old)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="kernel_names"):
        write_table(profile, tmp_path / "k.txt", old)  # type: ignore[arg-type]
    assert not (tmp_path / "k.txt").exists()

