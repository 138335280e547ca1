"""One width for everything printed: every source in tests/data through ``report`` (and a
few through ``findings`` and other table kinds) at COLUMNS=120 prints no line over 120
columns on stdout or stderr, log records included, and no table cell that starts with "…"
(a module name keeps its head). In this process, for speed: each source read as the golden
tests read it, once per source and worker, in its source's group."""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from torch_nsight.cli.main import main
from torch_nsight.cli.text import log_handler, shell_command

DATA = Path(__file__).resolve().parents[1] / "data"
WIDTH = 120


def _sources() -> list[Path]:
    """Every source ``report`` reads in tests/data: reports and saved profiles, sweep and
    timeline directories (a report inside a directory is read through the directory)."""
    folders = {p.parent for p in DATA.rglob("*") if p.name in ("sweep.json", "timeline.json")}
    files = [p for p in DATA.rglob("*")
             if p.name.endswith((".ncu-rep.xz", ".parquet")) and "tn-cache" not in p.name
             and p.parent not in folders]
    return sorted([*folders, *files])


SOURCES = _sources()
#: A cell that starts with "…": two spaces (or the line's start) before it.
CUT_HEAD = re.compile(r"(?:^|\s\s)…")


@pytest.fixture
def logged() -> Iterator[None]:
    """The CLI's log records, on stderr as a terminal shows them (under pytest the CLI's own
    logging set-up leaves the root logger to pytest)."""
    handler = log_handler()
    logger = logging.getLogger("torch_nsight")
    logger.addHandler(handler)
    try:
        yield
    finally:
        logger.removeHandler(handler)


def _check(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    status = main(argv)
    out, err = capsys.readouterr()
    assert status == 0, err
    for line in (out + err).splitlines():
        assert len(line) <= WIDTH, f"{argv}: {len(line)} columns: {line}"
        assert not CUT_HEAD.search(line), f"{argv}: a cell starts with '…': {line}"
    return out + err


def test_the_walk_finds_every_kind_of_source() -> None:
    names = {p.name for p in SOURCES}
    assert {"sweep_stack", "timeline_train", "emit_nvtx.ncu-rep.xz",
            "profile_format1.parquet", "vit_timeline"} <= names
    assert len(SOURCES) >= 35


@pytest.mark.parametrize("source", [
    pytest.param(p, marks=pytest.mark.xdist_group(p.relative_to(DATA).as_posix()),
                 id=p.relative_to(DATA).as_posix()) for p in SOURCES])
def test_report_fits_120_columns(source: Path, logged: None,
                                 capsys: pytest.CaptureFixture[str],
                                 monkeypatch: pytest.MonkeyPatch) -> None:
    import torch_nsight.loading
    from tests.golden_sources import read_once

    monkeypatch.setattr(torch_nsight.loading, "load", read_once)
    _check(["report", str(source)], capsys)


@pytest.mark.parametrize("argv", [
    ["findings", "findings_conv"], ["findings", "findings_rules"],
    ["report", "findings_conv", "--by", "finding"],
    ["report", "sweep_stack", "--format", "grid"],
    ["report", "runs/gpt2_runs10", "--by", "module"],
    ["report", "compile/vit_train.ncu-rep.xz", "--by", "kernel_name", "--top", "15"],
    ["report", "timeline_train", "--findings"],
], ids=" ".join)
def test_other_commands_and_kinds_fit(argv: list[str], logged: None,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    _check([argv[0], str(DATA / argv[1]), *argv[2:]], capsys)


def test_a_fix_keeps_its_code_whole(capsys: pytest.CaptureFixture[str]) -> None:
    text = _check(["report", str(DATA / "findings_conv"), "--by", "finding"], capsys)
    assert "model.to(memory_format=torch.channels_last)" in text
    assert "(x.to(memory_format=torch.channels_last))." in text


def test_a_command_to_copy_wraps_with_continuations() -> None:
    import shlex

    from torch_nsight.cli.text import joined_command
    from torch_nsight.metrics import METRIC_SETS

    words = ["ncu", "--metrics", ",".join(METRIC_SETS["fast"].metrics), "--nvtx",
             "python", "train.py", "--name", "a b"]
    text = shell_command(words, WIDTH, quoted=["TORCH_NSIGHT_STEPS=10:12"])
    assert max(map(len, text.splitlines())) <= WIDTH
    assert shlex.split(joined_command(text)) == ["TORCH_NSIGHT_STEPS=10:12", *words]
