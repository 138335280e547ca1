"""Real recorded reports (tests/data/) and a way to read them back through ncu_report
directly, so that tests compare the tidy table with the reader's own answers."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from torch_nsight.report import reader

DATA = Path(__file__).resolve().parents[1] / "data"
LLAMA = DATA.parent.parent / "torch_nsight" / "demo" / "llama_block_fwd_bwd.ncu-rep.xz"


@pytest.fixture(scope="session")
def llama_path() -> Path:
    """The recorded Llama-block report (forward and backward, roofline metric set)."""
    return LLAMA


@pytest.fixture(scope="session")
def llama_actions() -> Iterator[list[Any]]:
    """Every action of the Llama-block fixture, opened with ncu_report itself."""
    with reader.local_report(LLAMA) as local:
        import ncu_report

        context = ncu_report.load_report(str(local))
        yield [context.range_by_idx(r).action_by_idx(a)
               for r in range(context.num_ranges())
               for a in range(context.range_by_idx(r).num_actions())]


@pytest.fixture
def llama_copy(tmp_path: Path) -> Path:
    """A private copy of the fixture, so caches are written to tmp_path, not tests/data."""
    target = tmp_path / LLAMA.name
    shutil.copyfile(LLAMA, target)
    return target
