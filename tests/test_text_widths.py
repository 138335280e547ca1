"""Every text output fits the terminal it is printed to, at 80 columns here and at 120 in the
golden tests (the same texts, rendered there), over every recorded source in tests/data
(issue 47): the tables, findings, comparisons and the demo,
their notes and warnings on standard error too; forward and backward rows stay apart (the
``dir`` column is never dropped) and a module keeps its distinguishing end
(``…post_attention_layernorm ×8``), however narrow the terminal.

Each source is read once (tests/golden_sources.py's reading, shared with the golden tests when
they run in the same process) and its findings computed once for both widths.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest

from tests import golden_sources as golden
from tests.golden import findings_computed_once
from torch_nsight.analyze import has_ranks
from torch_nsight.profile import Profile
from torch_nsight.render.fit_names import MAX_NAME_END
from torch_nsight.render.readable_numbers import printable

#: 120 is the width the golden outputs are rendered for: tests/test_golden_outputs.py checks
#: it on the same texts.
WIDTHS = (80,)
#: The text outputs of a source: ``torch-nsight`` arguments after the source's path.
OUTPUTS: dict[str, list[str]] = {
    "hotspots": ["report"], "modules": ["report", "--by", "module"],
    "kernel_names": ["report", "--by", "kernel_name"], "shapes": ["report", "--by", "shape"],
    "launches": ["report", "--by", "launch", "--top", "40"],
    "findings": ["findings"], "by_finding": ["report", "--by", "finding"],
}
#: Outputs whose rows are per module and direction: ``dir`` is shown whenever both are.
WITH_DIRECTION = ("hotspots", "modules", "findings", "by_finding")


@pytest.fixture(autouse=True, scope="module")
def _findings_once() -> Iterator[None]:
    """A profile's findings computed once for all its outputs at both widths."""
    with findings_computed_once():
        yield


def _overflow(text: str, width: int) -> list[str]:
    """The lines of ``text`` (standard output and error, not the test's own two head lines)
    wider than ``width``."""
    return [line for line in text.splitlines()[2:] if len(line) > width]


def _both_directions(profile: Profile) -> bool:
    return {"fwd", "bwd"} <= set(profile.kernels["direction"].dropna())


def _ends(profile: Profile) -> set[str]:
    """The distinguishing ends of the top hotspots' modules (last dotted part and ``×N``)."""
    ends = set()
    for row in profile.hotspot_table(n=10, order="headroom", level="kernel").to_dict("records"):
        module: Any = row.get("module")
        if not isinstance(module, str):
            continue
        blocks = row.get("blocks")
        folded = isinstance(blocks, (int, float)) and blocks == blocks and int(blocks) > 1
        end = printable(module.rsplit(".", 1)[-1] + (f" ×{int(blocks)}" if folded else ""))
        if len(end) < MAX_NAME_END:
            ends.add(end)
    return ends


@pytest.mark.parametrize("source", golden.per_source(golden.SOURCES))
def test_text_fits_80_and_120_columns(source: golden.Source,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    loaded = golden.load(source.path)
    outputs = dict(OUTPUTS)
    if loaded.profile is not None and has_ranks(loaded.profile.kernels):
        outputs["ranks"] = ["report", "--by", "rank"]
    if loaded.profile is None:  # what the user sees is the error
        outputs = {"error": ["report"]}
    too_wide = []
    for width in WIDTHS:
        monkeypatch.setenv("COLUMNS", str(width))
        texts = {name: golden.cli_text([argv[0], source.path, *argv[1:]])
                 for name, argv in outputs.items()}
        if source.kind == "demo":
            texts["demo"] = golden.cli_text(["demo", "--recorded"])
        too_wide += [f"{name} at {width}: {line!r}" for name, text in texts.items()
                     for line in _overflow(text, width)]
        if loaded.profile is None:
            continue
        profile = loaded.profile
        top = profile.findings().head(10)
        shown = set(top["direction"].dropna()) if "direction" in top else set()
        if _both_directions(profile):
            for name in WITH_DIRECTION:
                if "finding" in name and not {"fwd", "bwd"} <= shown:
                    continue  # the rows shown are not of both directions
                table = texts[name].split("--- standard output\n", 1)[1]
                if "No finding" in table or "(no " in table:  # no table to tell rows apart
                    continue
                assert any(re.search(r"\bmodule\b", line) and re.search(r"\bdir\b", line)
                           for line in table.splitlines()), \
                    f"{name} at {width}: no dir column, fwd and bwd rows look alike"
        flat = texts["hotspots"].replace("\n", "")
        lost = [end for end in _ends(profile) if end not in flat]
        assert not lost, f"hotspots at {width}: module ends cut: {lost}"
    assert not too_wide, "\n".join(too_wide[:20])


@pytest.mark.parametrize("pair", golden.per_pair(golden.PAIRS))
def test_compare_fits_80_and_120_columns(pair: tuple[str, str],
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    too_wide = []
    for width in WIDTHS:
        monkeypatch.setenv("COLUMNS", str(width))
        for options in ([], ["--by", "kernel"]):
            text = golden.cli_text(["compare", *pair, *options])
            too_wide += [f"{options} at {width}: {line!r}" for line in _overflow(text, width)]
    assert not too_wide, "\n".join(too_wide[:20])
