"""No report cache beside the recorded reports: tests/conftest.py sends a test run's caches
to a folder of its own, and a cache left in tests/data (a shell that read a fixture with the
cache on) would make later runs skip the real reader."""

from __future__ import annotations

import os
from pathlib import Path

from torch_nsight.report.cache import CACHE_DIR_ENV, CACHE_SUFFIX

DATA = Path(__file__).resolve().parent / "data"


def test_no_cache_lies_beside_the_fixtures() -> None:
    found = sorted(str(p.relative_to(DATA)) for p in DATA.rglob(f"*{CACHE_SUFFIX}"))
    assert not found, f"delete these caches beside the fixtures: {found}"


def test_the_runs_caches_go_to_a_folder_of_their_own() -> None:
    folder = Path(os.environ[CACHE_DIR_ENV])
    assert folder.is_dir() and DATA not in folder.parents
