"""One registry of table kinds: the renderers, the command line and docs/cli.md agree on it."""

from __future__ import annotations

import re
from pathlib import Path
from typing import get_args

import pytest

from torch_nsight.analyze.hotspots import HotspotOrder
from torch_nsight.cli.main import build_parser
from torch_nsight.profile import Profile
from torch_nsight.render import TABLE_KINDS, TABLES, render_table, table_frame
from torch_nsight.render.kinds import DEFAULT_ROWS, HOTSPOT_ORDERS, TableKind

DOCS = Path(__file__).resolve().parents[2] / "docs" / "cli.md"


def documented_kinds() -> list[str]:
    """The kinds named in the first column of docs/cli.md's ``--table`` table."""
    text = DOCS.read_text(encoding="utf-8")
    header = text.index("| `--table` |")
    rows = text[header:].split("\n\n", 1)[0].splitlines()[2:]
    return [re.match(r"\| `(\w+)`", row).group(1) for row in rows]


def test_docs_describe_every_registered_kind() -> None:
    assert documented_kinds() == list(TABLES)


def test_docs_synopsis_lists_the_kinds() -> None:
    assert f"[--table {'|'.join(TABLES)}]" in DOCS.read_text(encoding="utf-8")


def test_typing_matches_the_registry() -> None:
    assert get_args(TableKind) == TABLES == tuple(TABLE_KINDS)
    assert get_args(HotspotOrder) == HOTSPOT_ORDERS
    assert dict(DEFAULT_ROWS) == {"hotspots": 10, "modules": None, "kernels": None}


@pytest.mark.parametrize("command", ["report", "demo"])
def test_cli_choices_come_from_the_registry(command: str) -> None:
    parser = build_parser()
    subparsers = next(a for a in parser._actions if a.dest == "command")
    options = {a.dest: a for a in subparsers.choices[command]._actions}
    assert tuple(options["table"].choices) == TABLES
    assert tuple(options["by"].choices) == HOTSPOT_ORDERS
    for name, spec in TABLE_KINDS.items():
        assert f"{name}: {spec.summary}" in options["table"].help


@pytest.mark.parametrize("what", TABLES)
def test_every_kind_renders_its_default_rows(profile: Profile, what: str) -> None:
    frame = table_frame(profile, what)
    expected = DEFAULT_ROWS[what]
    assert len(frame) == (expected if expected is not None else
                          {"modules": 21, "kernels": 40}[what])
    text = render_table(profile, what)
    assert len(text.splitlines()) == 1 + len(frame)  # plain: a header line, then the rows


def test_unknown_kind(profile: Profile) -> None:
    with pytest.raises(ValueError, match="hotspots, modules, kernels"):
        table_frame(profile, "roofs")  # type: ignore[arg-type]
