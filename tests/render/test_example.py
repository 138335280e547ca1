"""examples/report_from_fixture.py runs on the CPU and writes both plots."""

from __future__ import annotations

from pathlib import Path

import pytest

from examples import report_from_fixture


def test_example_writes_plots(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert report_from_fixture.main(["--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "Hotspots" in out and "· · self_attn.qkv_proj" in out
    for name in ("roofline.png", "scaling.png"):
        assert (tmp_path / name).read_bytes().startswith(b"\x89PNG")
