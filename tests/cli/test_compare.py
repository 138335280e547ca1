"""``torch-nsight compare`` on real recorded pairs: exit codes, formats, one-line errors.

Expected numbers come from the loaded tables (``compare_profiles``, ``module_tree``), never
typed by hand."""

from __future__ import annotations

import io
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

import torch_nsight
from torch_nsight.analyze import compare_profiles, module_tree
from torch_nsight.cli.main import main

from .conftest import imported_after
from .test_cli import run_cli

DATA = Path(__file__).resolve().parents[1] / "data"


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Copies of the recorded pairs, so that their caches land in tmp, not in tests/data."""
    folder = tmp_path_factory.mktemp("compare")
    for name in ("hand_s128.ncu-rep.xz", "hand_s512.ncu-rep.xz"):
        shutil.copy(DATA / name, folder / name)
    shutil.copy(DATA / "hand_s128.ncu-rep.xz", folder / "copy_s128.ncu-rep.xz")
    shutil.copytree(DATA / "sweep_stack", folder / "sweep_stack",
                    ignore=shutil.ignore_patterns("*.tn-cache.parquet"))
    return folder


def compare(capsys: pytest.CaptureFixture[str], *argv: str | Path) -> tuple[int, str, str]:
    status = main(["compare", *map(str, argv)])
    out, err = capsys.readouterr()
    return status, out, err


@pytest.mark.slow
def test_a_real_regression_exits_1(data: Path) -> None:
    result = run_cli("python-m", "compare", "hand_s128.ncu-rep.xz", "hand_s512.ncu-rep.xz",
                     "--threshold", "5%", cwd=data)
    assert result.returncode == 1, result.stderr
    assert result.stderr == ""  # a regression is not an error: nothing on stderr
    lines = result.stdout.splitlines()
    rows = compare_profiles(torch_nsight.load(data / "hand_s128.ncu-rep.xz").kernels,
                            torch_nsight.load(data / "hand_s512.ncu-rep.xz").kernels)
    regressed = int((rows["verdict"] == "regressed").sum())
    improved = int((rows["verdict"] == "improved").sum())
    assert lines[0].startswith(f"{regressed} regressed, {improved} improved of {len(rows)} "
                               "modules at 5%; largest: ")
    assert lines[1].startswith("baseline hand_s128.ncu-rep.xz: NVIDIA H200: 40 kernels")
    assert lines[2].startswith("current hand_s512.ncu-rep.xz: NVIDIA H200: 40 kernels")
    assert lines[3].startswith(f"modules compared at threshold 5%: {regressed} regressed")
    at = lines.index("") + 1  # the table after the blank line
    assert lines[at].split()[:5] == ["module", "dir", "baseline", "µs", "current"]
    assert "regressed" in lines[at + 1]


def test_a_report_against_itself_exits_0(data: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = compare(capsys, data / "hand_s128.ncu-rep.xz",
                               data / "hand_s128.ncu-rep.xz", "--threshold", "0")
    assert status == 0, err
    assert out.startswith("0 regressed, 0 improved of 21 modules at 0%\n")
    assert "modules compared at threshold 0%: 21 unchanged" in out
    assert out.rstrip().endswith("nothing changed beyond 0% (or beyond the noise): --all "
                                 "shows every row")


def test_markdown_is_ready_for_a_pull_request(data: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = compare(capsys, data / "hand_s128.ncu-rep.xz",
                             data / "hand_s512.ncu-rep.xz", "--format", "markdown",
                             "--depth", "1", "--all")
    assert status == 1
    lines = out.splitlines()
    assert lines[0].startswith("### torch-nsight compare: ")
    assert any(line.startswith("- modules compared at threshold 5%") for line in lines)
    header = next(line for line in lines if line.startswith("| module"))
    assert [c.strip() for c in header.strip("|").split("|")] == [
        "module", "dir", "baseline µs", "current µs", "change %", "verdict", "bound",
        "headroom µs"]
    base = torch_nsight.load(data / "hand_s128.ncu-rep.xz").kernels
    cur = torch_nsight.load(data / "hand_s512.ncu-rep.xz").kernels
    rows = compare_profiles(base, cur, depth=1)
    attn = rows[(rows["module_path"] == "LlamaBlock/self_attn") & (rows["direction"] == "bwd")].iloc[0]
    line = next(x for x in lines if x.startswith("| · self_attn ") and "| bwd " in x)
    cells = [c.strip() for c in line.strip("|").split("|")]
    assert cells[2] == f"{attn['baseline_ns'] / 1e3:,.2f}"
    assert cells[3] == f"{attn['current_ns'] / 1e3:,.2f}"
    assert cells[4] == f"{attn['change_pct']:+,.1f}"
    assert cells[5] == "**regressed**"
    assert sum(line.startswith("|") for line in lines) == len(rows) + 2  # header, rule


def test_csv_and_json_go_to_stdout(data: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = (data / "hand_s128.ncu-rep.xz", data / "hand_s512.ncu-rep.xz", "--by", "kernel")
    status, out, _ = compare(capsys, *args, "--format", "csv")
    assert status == 1
    table = pd.read_csv(io.StringIO(out))
    base = torch_nsight.load(data / "hand_s128.ncu-rep.xz").kernels
    cur = torch_nsight.load(data / "hand_s512.ncu-rep.xz").kernels
    rows = compare_profiles(base, cur, by="kernel")
    assert list(table.columns) == list(rows.columns)
    assert list(table["verdict"]) == list(rows["verdict"])
    status, out, _ = compare(capsys, *args, "--format", "json")
    assert status == 1
    document = json.loads(out)
    assert document["by"] == "kernel" and document["threshold_pct"] == 5.0
    assert len(document["rows"]) == len(rows)
    assert document["verdicts"]["regressed"] == int((rows["verdict"] == "regressed").sum())


def test_a_copy_of_a_report_changes_nothing(data: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = compare(capsys, data / "hand_s128.ncu-rep.xz",
                               data / "copy_s128.ncu-rep.xz", "--by", "kernel",
                               "--format", "csv")
    assert status == 0 and err == ""
    table = pd.read_csv(io.StringIO(out))
    assert (table["change_pct"] == 0).all() and set(table["verdict"]) == {"unchanged"}


@pytest.mark.slow
def test_a_sweep_directory_against_itself(data: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    sweep = data / "sweep_stack"
    status, out, _ = compare(capsys, sweep, sweep, "--format", "csv")
    assert status == 0
    table = pd.read_csv(io.StringIO(out))
    assert set(table["shape"]) == {"2x128x256", "2x512x256"}
    assert set(table["verdict"]) == {"unchanged"}
    assert len(table) == len(module_tree(torch_nsight.load(sweep).kernels))


def test_unrelated_models_are_an_error_without_a_table(
        data: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = compare(capsys, data / "sweep_stack", data / "hand_s128.ncu-rep.xz",
                               "--all")
    assert status == 1  # nothing matched: a CI gate must not pass on that
    assert out == ""  # an error prints no table (docs/cli.md)
    assert err.splitlines()[-1].startswith("torch-nsight: error: no row of the two "
                                           "profiles matched")
    rows = compare_profiles(torch_nsight.load(data / "sweep_stack").kernels,
                            torch_nsight.load(data / "hand_s128.ncu-rep.xz").kernels)
    stack = module_tree(torch_nsight.load(data / "sweep_stack").kernels)
    hand = module_tree(torch_nsight.load(data / "hand_s128.ncu-rep.xz").kernels)
    assert (rows["verdict"] == "only in baseline").sum() == len(stack)
    assert (rows["verdict"] == "only in current").sum() == len(hand)


def test_one_label_each_is_compared_and_said(data: Path, tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    saved = []
    for name in ("hand_s128", "hand_s512"):
        profile = torch_nsight.load(data / f"{name}.ncu-rep.xz", labels=[name])
        saved.append(profile.save(tmp_path / f"{name}.parquet"))
    status, out, err = compare(capsys, *saved)
    assert status == 1
    warning = " ".join(err.split())  # one warning, wrapped to the terminal's width
    assert warning.startswith("torch-nsight: warning: comparing shape hand_s128 (baseline) "
                              "with shape hand_s512 (current)")
    assert warning.removeprefix("torch-nsight: ") in " ".join(out.split())
    assert "only in" not in out


def test_different_gpus_warn_once_on_stderr_and_in_the_header(
        data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    profile = torch_nsight.load(data / "hand_s128.ncu-rep.xz")
    other = profile.with_kernels(profile.kernels.assign(gpu="NVIDIA A100"))
    path = other.save(tmp_path / "a100.parquet")
    status, out, err = compare(capsys, data / "hand_s128.ncu-rep.xz", path, "--format",
                               "markdown")
    assert status == 0
    lines = err.splitlines()
    assert lines[0].startswith("torch-nsight: warning: the profiles come from different GPUs")
    assert all(line.startswith("  ") for line in lines[1:])  # one warning, wrapped
    assert "NVIDIA A100" in err
    assert any(line.startswith("- **warning:** the profiles come from different GPUs")
               for line in out.splitlines())


def test_a_terminal_reads_each_warning_once(data: Path, tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str],
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """Standard output and error on one terminal: the warning is in the table's header
    only; as csv, or with either stream redirected, on standard error too."""
    from torch_nsight.cli import compare as compare_command

    profile = torch_nsight.load(data / "hand_s128.ncu-rep.xz")
    path = profile.with_kernels(profile.kernels.assign(gpu="NVIDIA A100")).save(
        tmp_path / "a100.parquet")
    monkeypatch.setattr(compare_command, "_same_terminal", lambda: True)
    _, out, err = compare(capsys, data / "hand_s128.ncu-rep.xz", path)
    assert err == "" and "different GPUs" in out
    _, out, err = compare(capsys, data / "hand_s128.ncu-rep.xz", path, "--format", "csv")
    assert "different GPUs" in err and "different GPUs" not in out
    # nothing matched: no table follows, so the warnings that say why are on standard error
    status, out, err = compare(capsys, data / "sweep_stack", path)
    assert status == 1 and out == "" and "different GPUs" in err


@pytest.mark.parametrize("argv", [
    ["a.ncu-rep"],
    ["a.ncu-rep", "b.ncu-rep", "--threshold", "five"],
    ["a.ncu-rep", "b.ncu-rep", "--threshold", "-1%"],
    ["a.ncu-rep", "b.ncu-rep", "--by", "op"],
    ["a.ncu-rep", "b.ncu-rep", "--format", "html"],
    ["a.ncu-rep", "b.ncu-rep", "--depth", "-1"],
])
def test_usage_errors_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main(["compare", *argv])
    assert done.value.code == 2
    assert "usage: torch-nsight compare" in capsys.readouterr().err


def test_a_missing_file_is_one_line(data: Path) -> None:
    result = run_cli("console-script", "compare", "hand_s128.ncu-rep.xz", "missing.ncu-rep",
                     cwd=data)
    assert result.returncode == 1
    assert result.stdout == ""
    (line,) = result.stderr.splitlines()
    assert line.startswith("torch-nsight: error: ") and "missing.ncu-rep" in line


def test_help_lists_compare() -> None:
    result = subprocess.run([sys.executable, "-m", "torch_nsight", "--help"],
                            capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0 and "compare" in result.stdout


def test_compare_does_not_import_torch(data: Path) -> None:
    found = imported_after(["compare", str(data / "hand_s128.ncu-rep.xz"),
                            str(data / "hand_s512.ncu-rep.xz")], data)
    assert found["status"] == 1
    assert "pandas" in found["heavy"]  # it did run
    assert not {"torch", "torch_nsight.capture", "torch_nsight.collect",
                "matplotlib"} & set(found["heavy"])
    assert imported_after(["compare", "--help"], data)["heavy"] == []


def test_the_compare_module_imports_nothing_heavy() -> None:
    code = ("import sys, torch_nsight.cli.compare\n"
            "print([m for m in ('torch', 'pandas', 'torch_nsight.collect', 'matplotlib')"
            " if m in sys.modules])")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=120, check=True)
    assert result.stdout.strip() == "[]"


def test_different_ncu_versions_warn(data: Path, tmp_path: Path,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    import dataclasses

    profile = torch_nsight.load(data / "hand_s128.ncu-rep.xz")
    (recorded,) = {s.ncu_version for s in profile.meta.sources}
    sources = tuple(dataclasses.replace(s, ncu_version="2023.1.0")
                    for s in profile.meta.sources)
    older = dataclasses.replace(profile, meta=dataclasses.replace(profile.meta,
                                                                  sources=sources))
    path = older.save(tmp_path / "older.parquet")
    status, out, err = compare(capsys, path, data / "hand_s128.ncu-rep.xz")
    assert status == 0
    (line,) = err.splitlines()
    assert "different ncu versions" in line and "2023.1.0" in line and recorded in line
    assert line.removeprefix("torch-nsight: ") in out.splitlines()


def test_two_different_models_are_said_to_share_little(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A ResNet-50 step against a ViT-S step: two rows match (the AdamW step and the rows
    outside modules), the others are on one side only; the output says how little of each
    side's time the verdicts speak of. The same step on both sides says nothing of it."""
    for name in ("resnet50", "vit_s"):
        shutil.copy(DATA / "latency" / f"{name}.ncu-rep.xz", tmp_path / f"{name}.ncu-rep.xz")
    status, out, err = compare(capsys, tmp_path / "resnet50.ncu-rep.xz",
                               tmp_path / "vit_s.ncu-rep.xz", "--format", "csv")
    said = " ".join(err.split())
    assert "different models or shapes?" in said and "(2 of 556 rows)" in said, err
    status, out, err = compare(capsys, tmp_path / "resnet50.ncu-rep.xz",
                               tmp_path / "resnet50.ncu-rep.xz", "--format", "csv")
    assert status == 0 and "different models" not in err + out
