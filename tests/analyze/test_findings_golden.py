"""Findings of every recorded source in tests/data, as text, against golden files made by the
code before the checks became a registry (issue 35): every row, evidence and gain unchanged.

``TORCH_NSIGHT_REGEN_GOLDEN=1`` rewrites tests/analyze/golden_findings/; a change there is
read by eye before it is committed.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import pytest

import torch_nsight
from tests.analyze.test_physical import DATA, recorded_sources
from torch_nsight.errors import TorchNsightError

GOLDEN = Path(__file__).resolve().parent / "golden_findings"
REGENERATE = os.environ.get("TORCH_NSIGHT_REGEN_GOLDEN") == "1"


def _cell(value: object) -> str:
    """A cell exactly: floats by ``repr`` (every digit), missing values as ``None``."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "None"
    return repr(value)


def findings_text(source: Path) -> str:
    """Both finding tables of ``source`` (one row per block, then folded), a cell a line."""
    try:
        profile = torch_nsight.load(source, cache=False)
    except TorchNsightError as err:  # a source that is not a profile on its own
        return f"not a profile: {type(err).__name__}\n"
    lines = []
    for fold in (False, True):
        table = profile.finding_table(fold)
        lines.append(f"== fold={fold}: {len(table)} rows, columns {list(table.columns)}")
        for number, row in enumerate(table.to_dict("records")):
            lines.append(f"-- row {number}")
            lines += [f"{name}: {_cell(value)}" for name, value in row.items()]
    return "\n".join(lines) + "\n"


def _golden_name(source: Path) -> str:
    return str(source.relative_to(DATA)).replace("/", "__").rstrip("_") + ".txt"


@pytest.mark.parametrize("source", recorded_sources(),
                         ids=lambda p: str(p.relative_to(DATA)))
def test_findings_unchanged(source: Path) -> None:
    path = GOLDEN / _golden_name(source)
    text = findings_text(source)
    if REGENERATE:
        GOLDEN.mkdir(exist_ok=True)
        path.write_text(text, encoding="utf-8")
    assert path.is_file(), f"{path} missing: run with TORCH_NSIGHT_REGEN_GOLDEN=1"
    assert text == path.read_text(encoding="utf-8")
