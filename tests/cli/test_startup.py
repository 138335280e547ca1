"""Reading reports never imports torch: ``torch-nsight report`` (and its ``--help``) and
``demo --recorded`` run where torch is slow to import or absent. Checked in a fresh
interpreter, since this test process has imported torch already."""

from __future__ import annotations

from pathlib import Path

import pytest

from .conftest import imported_after


def test_report_does_not_import_torch(report: Path, tmp_path: Path) -> None:
    found = imported_after(["report", str(report)], tmp_path)
    assert found["status"] == 0
    assert "torch" not in found["heavy"]
    assert not {"torch_nsight.capture", "torch_nsight.collect"} & set(found["heavy"])
    # A table alone does not draw: matplotlib stays out too.
    assert "matplotlib" not in found["heavy"]
    assert "pandas" in found["heavy"]  # the check above would pass if nothing ran


@pytest.mark.slow
def test_report_with_plots_does_not_import_torch(report: Path, tmp_path: Path) -> None:
    found = imported_after(["report", str(report), "--plot", str(tmp_path / "r.png"),
                            "--plot-scaling", str(tmp_path / "s.png")], tmp_path)
    assert found["status"] == 0
    assert "torch" not in found["heavy"] and "matplotlib" in found["heavy"]


@pytest.mark.parametrize("argv", [["report", "--help"], ["--help"], ["demo", "--help"],
                                  ["report", "missing.ncu-rep", "--csv", "t.txt"]])
def test_help_and_refused_options_import_nothing_heavy(argv: list[str],
                                                       tmp_path: Path) -> None:
    found = imported_after(argv, tmp_path)
    assert found["status"] in (0, 1)
    assert found["heavy"] == []


def test_recorded_demo_does_not_import_torch(tmp_path: Path) -> None:
    found = imported_after(["demo", "--recorded", "-n", "1"], tmp_path)
    assert found["status"] == 0
    assert "torch" not in found["heavy"]
