"""Physically possible numbers on every recorded source in tests/data: no kernel above its
roofline ceiling (which no kernel can be), however its FLOPs were counted. Each source read
as the golden tests read it (once per source and worker, in its source's group)."""

from __future__ import annotations

import pytest

from tests.golden_sources import Source, find_sources, per_source
from tests.golden_sources import load as golden_load

#: Every recorded source that is a profile: reports, saved profiles, sweep folders.
PROFILES = [s for s in find_sources()
            if s.kind in ("report", "report in a sweep folder", "saved profile", "sweep",
                          "focused sweep")]


def test_there_are_sources_to_check() -> None:
    assert len(PROFILES) >= 30


@pytest.mark.parametrize("source", per_source(PROFILES))
def test_no_kernel_above_its_roof(source: Source) -> None:
    loaded = golden_load(source.path)
    if loaded.profile is None:  # a source that is not a profile on its own
        pytest.skip(str(loaded.error))
    kernels = loaded.profile.kernels
    if "pct_of_roof" not in kernels:
        pytest.skip("no roofline columns")
    assert not (kernels["pct_of_roof"] > 100).any()
    above = kernels["above_roof"].sum() if "above_roof" in kernels else 0
    assert above == 0, kernels.loc[kernels["above_roof"], ["kernel", "module_path"]]
    said = " ".join(record.getMessage() for record in loaded.records)
    assert "above their roofline ceiling" not in said
