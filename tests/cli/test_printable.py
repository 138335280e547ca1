"""Names read from files are shown escaped (issue 33): a kernel or module name, or a file
name, holding escape codes or newlines never reaches the terminal raw, in any table kind.
The names are planted in a copy of the recorded CUDA-graph trace
(tests/data/graph_captured_timeline)."""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

import pytest

from torch_nsight.render.kinds import GROUPINGS
from torch_nsight.render.readable_numbers import printable

from .conftest import run_main

TRACE = Path(__file__).resolve().parents[1] / "data" / "graph_captured_timeline" / \
    "trace.json.gz"
HOSTILE = "\x1b[2J\x1b]0;owned\x07\nfake row\u202e"


@pytest.fixture(scope="module")
def planted(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The trace with a hostile kernel name and module range name."""
    with gzip.open(TRACE, "rt", encoding="utf-8") as handle:
        document = json.load(handle)
    for event in document["traceEvents"]:
        if event.get("cat") == "kernel":
            event["name"] = f"void evil{HOSTILE}<int>(int)"
        elif event.get("name") == "torch_nsight/0":
            event["name"] = f"torch_nsight/0{HOSTILE}"
    path = tmp_path_factory.mktemp("planted") / "trace.json"
    path.write_text(json.dumps(document))
    return path


def test_printable_escapes_controls_and_keeps_the_rest() -> None:
    assert printable("h.0.attn µs ±") == "h.0.attn µs ±"
    assert printable("a\x1b[31mb\nc\u202e") == "a\\x1b[31mb\\nc\\u202e"


def test_printable_shows_a_byte_of_a_name_that_is_not_utf8_as_ls_does() -> None:
    """Python keeps such a byte as a lone surrogate, which a UTF-8 terminal refuses."""
    shown = printable(os.fsdecode(b"run\xff.ncu-rep"))
    assert shown == "run\\xff.ncu-rep" and shown.encode("utf-8")


@pytest.mark.parametrize("by", sorted(GROUPINGS))
def test_every_table_kind_shows_hostile_names_escaped(
        planted: Path, by: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = run_main(["report", str(planted), "--by", by, "--findings"], tmp_path,
                                monkeypatch, capsys)
    assert "\x1b" not in out and "\u202e" not in out and "fake row\n" not in out
    if status == 0 and by in ("hotspot", "kernel_name", "module", "launch"):
        assert "\\x1b" in out


def test_an_error_naming_a_hostile_file_is_one_escaped_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    status, _, err = run_main(["report", f"run{HOSTILE}.ncu-rep"], tmp_path, monkeypatch,
                              capsys)
    assert status == 1
    (line,) = err.strip().splitlines()
    assert "\x1b" not in line and "run\\x1b[2J" in line
