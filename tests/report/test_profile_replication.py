"""Identical blocks profiled once under ``torch-nsight profile``: two real reports of the same
timm ViT-S/16 training step on the H200, one with every kernel profiled (2026-11-23), one
where ``instrument()`` checked the twelve blocks on step 4 and ncu left blocks 1-11 out of
step 5 (2026-11-24, tests/data/README.md)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from tests.recorded import load_recorded

DATA = Path(__file__).resolve().parents[1] / "data" / "profile_fast"


@pytest.fixture(scope="module")
def both() -> tuple[pd.DataFrame, pd.DataFrame]:
    every = load_recorded(DATA / "vit_profile.ncu-rep.xz")
    once = load_recorded(DATA / "vit_profile_replicated.ncu-rep.xz")
    assert once.calls is not None and len(once.calls) == len(every.calls)
    return every.kernels, once.kernels


def _block(k: pd.DataFrame, block: str) -> list[tuple[str, str, str]]:
    rows = k[k["module"].astype(str).str.startswith(block + ".")
             | (k["module"].astype(str) == block)]
    return sorted(zip(rows["module"].str.replace(block, "B", regex=False),
                      rows["direction"].astype(str), rows["kernel"], strict=True))


def test_the_carried_groups_give_every_replica_its_rows(
        both: tuple[pd.DataFrame, pd.DataFrame]) -> None:
    every, once = both
    assert len(once) == len(every) == 770
    copied = once["replicated_from"].notna()
    # blocks 1-11 (60 kernels each) and blocks.0.norm2 (4: a twin of blocks.0.norm1)
    assert copied.sum() == 664 == 11 * 60 + 4
    assert set(once.loc[copied, "replicated_from"].str.extract(r"^(blocks\.\d+)")[0]) == {
        "blocks.0"}
    assert (once.groupby("module").size().sort_index()
            .equals(every.groupby("module").size().sort_index()))
    for block in ("blocks.0", "blocks.6", "blocks.11"):
        assert _block(once, block) == _block(every, block)  # the same kernels, forward, backward
    assert once["bound"].notna().all() and once["pct_of_roof"].notna().all()


def test_replicated_times_stand_for_the_measured_ones(
        both: tuple[pd.DataFrame, pd.DataFrame]) -> None:
    every, once = both

    def per_block(k: pd.DataFrame) -> pd.Series:
        block = k["module"].astype(str).str.extract(r"^(blocks\.\d+)")[0]
        return k.groupby(block)["duration_ns"].sum()

    ratio = per_block(once) / per_block(every)
    assert len(ratio) == 12 and ratio.between(0.98, 1.02).all()
    assert once["duration_ns"].sum() / every["duration_ns"].sum() == pytest.approx(1, abs=0.01)
