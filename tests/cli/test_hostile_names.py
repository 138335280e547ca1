"""Names that attack the terminal or a spreadsheet (issue 45): a GPU, a module and a file
named with escape codes (OSC, CSI, C1, a bidi override, a newline) and a module named as a
spreadsheet formula reach no output raw. They are planted in the loaded profile of a real
recorded report (tests/data/hand_s128.ncu-rep.xz), saved under a hostile file name; every
renderer of ``report``, ``findings`` and ``compare`` then runs on it: the text shows them
escaped (``\\x1b``, ``\\u202e``), csv cells cannot start a formula (numbers, negative ones
included, stay numbers) and json keeps them exact, as JSON escapes."""

from __future__ import annotations

import csv
import io
import json
import re
import shutil
from pathlib import Path

import pytest

import torch_nsight
from torch_nsight.render.readable_numbers import CONTROL, printable

from .conftest import run_main

DATA = Path(__file__).resolve().parents[1] / "data"
ESCAPES = "\x1b]8;;https:evil.example\x07\x1b[2J\x9b31m\u202e\nforged: ok"
MODULE = f'=HYPERLINK("evil:{ESCAPES}")'
GPU = f"NVIDIA H200{ESCAPES}"
#: A line of standard output or error, or a csv cell, that starts a formula.
FORMULA = re.compile(r"^[=+\-@\t\r]")


@pytest.fixture(scope="module")
def planted(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, str]:
    """The recorded report (baseline) and its profile with hostile names, saved as a
    parquet with a hostile file name (current, the renamed module 20% faster: its parents
    got faster); and the module's original name."""
    folder = tmp_path_factory.mktemp("hostile")
    baseline = folder / "hand_s128.ncu-rep.xz"
    shutil.copy(DATA / baseline.name, baseline)
    profile = torch_nsight.load(baseline)
    kernels = profile.kernels
    renamed = kernels["module"] == kernels["module"].iloc[0]
    original = str(kernels.loc[renamed, "module"].iloc[0])
    kernels.loc[renamed, "module"] = MODULE
    kernels.loc[renamed, "module_path"] = [str(p).replace(original, MODULE)
                                           for p in kernels.loc[renamed, "module_path"]]
    kernels.loc[renamed, "duration_ns"] *= 0.8
    kernels["gpu"] = GPU
    current = profile.save(folder / "run\x1b]0;title\x07\u202e.parquet")
    return baseline, current, original


def _raw(text: str) -> list[str]:
    """The control characters in ``text`` that a terminal acts on (newlines of the layout
    aside)."""
    return [c for c in CONTROL.findall(text) if c != "\n"]


def _check_text(out: str, err: str) -> None:
    assert _raw(out) == [] and _raw(err) == []
    assert "\nforged: ok" not in out + err
    assert "\\x1b" in out + err  # shown, escaped


@pytest.mark.parametrize("argv", [
    ["report", "{current}"],
    ["report", "{current}", "--by", "module", "--findings"],
    ["report", "{current}", "--format", "markdown", "--findings"],
    ["findings", "{current}"],
    ["findings", "{current}", "--format", "markdown"],
    ["compare", "{baseline}", "{current}"],
    ["compare", "{baseline}", "{current}", "--format", "markdown", "--all"],
], ids=lambda argv: "-".join(a.strip("{}-") for a in argv))
def test_text_outputs_show_hostile_names_escaped(
        planted: tuple[Path, Path, str], argv: list[str], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    baseline, current, _ = planted
    argv = [a.format(baseline=baseline, current=current) for a in argv]
    _, out, err = run_main(argv, tmp_path, monkeypatch, capsys)
    _check_text(out, err)


def _cells(text: str) -> list[list[str]]:
    return list(csv.reader(io.StringIO(text)))


def _run_clean(planted: tuple[Path, Path, str], argv: list[str], tmp_path: Path,
               monkeypatch: pytest.MonkeyPatch,
               capsys: pytest.CaptureFixture[str]) -> tuple[list[str], str]:
    """Run ``argv`` on the planted pair ({baseline}, {current} filled in); its standard
    output and error hold no raw control character. The arguments run and the output."""
    baseline, current, _ = planted
    argv = [a.format(baseline=baseline, current=current) for a in argv]
    _, out, err = run_main(argv, tmp_path, monkeypatch, capsys)
    assert _raw(out) == [] and _raw(err) == []
    return argv, out


@pytest.mark.parametrize("argv", [
    ["report", "{current}", "--by", "module", "--format", "csv"],
    ["report", "{current}", "--format", "csv"],
    ["findings", "{current}", "--format", "csv"],
    ["compare", "{baseline}", "{current}", "--format", "csv"],
], ids=lambda argv: "-".join(a.strip("{}-") for a in argv))
def test_csv_cells_start_no_formula_and_hold_no_control(
        planted: tuple[Path, Path, str], argv: list[str], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    argv, out = _run_clean(planted, argv, tmp_path, monkeypatch, capsys)
    cells = [cell for row in _cells(out) for cell in row]
    formulas = [c for c in cells if FORMULA.match(c) and not _is_number(c)]
    assert formulas == []
    if "module" in argv or argv[0] == "compare":  # the renamed module's row, neutralised
        assert any(c.startswith("'=HYPERLINK") for c in cells)


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def test_compare_csv_keeps_negative_numbers(
        planted: tuple[Path, Path, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    baseline, current, _ = planted
    _, out, _ = run_main(["compare", str(baseline), str(current), "--format", "csv"],
                         tmp_path, monkeypatch, capsys)
    rows = list(csv.DictReader(io.StringIO(out)))
    faster = [r["change_pct"] for r in rows if r["change_pct"].startswith("-")]
    assert faster and all(float(change) < 0 for change in faster)  # numbers, no quote


def test_the_csv_file_of_report_is_neutralised_too(
        planted: tuple[Path, Path, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    _, current, _ = planted
    status, _, _ = run_main(["report", str(current), "--by", "module", "--csv", "out.csv",
                             "--json", "out.json"], tmp_path, monkeypatch, capsys)
    assert status == 0
    text = (tmp_path / "out.csv").read_text(encoding="utf-8")
    assert _raw(text) == []
    modules = [row["module"] for row in csv.DictReader(io.StringIO(text))]
    assert "'" + printable(MODULE) in modules
    document = (tmp_path / "out.json").read_text(encoding="utf-8")
    assert _raw(document) == []
    assert MODULE in {row["module"] for row in json.loads(document)}  # exact, as escapes


@pytest.mark.parametrize("argv", [
    ["report", "{current}", "--by", "module", "--format", "json"],
    ["findings", "{current}", "--format", "json"],
    ["compare", "{baseline}", "{current}", "--format", "json"],
], ids=lambda argv: "-".join(a.strip("{}-") for a in argv))
def test_json_escapes_every_control_and_keeps_the_names_exact(
        planted: tuple[Path, Path, str], argv: list[str], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    argv, out = _run_clean(planted, argv, tmp_path, monkeypatch, capsys)
    current = planted[1]
    document = json.loads(out)
    rows = document["rows"] if isinstance(document, dict) else document
    if argv[0] == "compare":
        assert document["current"] == str(current)  # the file name, exact
    assert any(MODULE in str(row.get("module_path") or row.get("module")) for row in rows) \
        or argv[0] == "findings"


def test_note_lines_escape_the_file_name(
        planted: tuple[Path, Path, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    _, current, _ = planted
    from torch_nsight.cli.text import say

    say(f"note: {current.name} holds kernel times only")
    out = capsys.readouterr().out
    assert _raw(out) == [] and "run\\x1b]0;title\\x07\\u202e.parquet" in out
