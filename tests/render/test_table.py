"""Tables rendered from the recorded report: golden text, every format, every file type."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd
import pytest

import torch_nsight
from tests.golden import diff_against_golden
from tests.recorded import load_recorded
from torch_nsight.profile import Profile
from torch_nsight.render import FORMATS, TABLES, render_table, table_frame, write_table
from torch_nsight.render.columns import REASON_WIDTH
from torch_nsight.render.readable_numbers import (
    format_count,
    format_giga,
    format_rate,
    format_us,
    shorten,
)

GOLDEN = Path(__file__).parent / "golden"
GOLDEN_FORMATS = ("plain", "github", "markdown")


def check_golden(name: str, text: str) -> None:
    """Compare with tests/render/golden/<name>; TORCH_NSIGHT_REGEN_GOLDEN=1 rewrites it."""
    difference = diff_against_golden(name, text + "\n", GOLDEN)
    assert difference is None, difference


@pytest.mark.parametrize("fmt", GOLDEN_FORMATS)
@pytest.mark.parametrize("what", [t for t in TABLES if t != "ranks"])  # ranks: tests/data
def test_golden_tables(profile: Profile, what: str, fmt: str) -> None:
    check_golden(f"{what}.{fmt}.txt", render_table(profile, what, fmt))


def test_golden_hotspots_by_time(profile: Profile) -> None:
    check_golden("hotspots_by_time.plain.txt", render_table(profile, "hotspots", order="time", n=5))


def test_golden_sweep_hotspots(sweep_profile: Profile) -> None:
    check_golden("sweep_hotspots.plain.txt", render_table(sweep_profile, n=6))


FINDINGS = Path(__file__).resolve().parents[1] / "data"


def test_golden_findings_verdicts() -> None:
    # kernels of every class from the recorded findings fixtures: the table as shown, then
    # each row's whole reason and next step (as files keep them), read by eye when changed
    parts = []
    for name in ("findings_gemm", "findings_chain", "findings_conv", "findings_fp32_off"):
        profile = load_recorded(FINDINGS / name)
        rows = table_frame(profile, n=6)
        parts += [f"{name}:", render_table(profile, n=6), ""]
        parts += [f"{i + 1}. {row.bound}: {row.reason}\n   next step: {row.next_step}"
                  for i, row in enumerate(rows.itertuples(index=False))]
        parts.append("")
    check_golden("findings_verdicts.plain.txt", "\n".join(parts).rstrip("\n"))


def test_golden_folded_tables_and_op_specific_findings() -> None:
    """A real decoder's repeated blocks folded (GPT-2: module tree and hotspots, with the
    spread of 10 runs) and the fixes named for what each chain computes (Llama's RMSNorm and
    rotary embedding), as a person reads them at 120 columns."""
    from torch_nsight.render.findings import render_findings

    gpt2 = torch_nsight.load(FINDINGS / "runs" / "gpt2_runs10")
    llama = torch_nsight.load(FINDINGS / "bound_calibration" / "llama_sol.ncu-rep.xz")
    parts = ["gpt2_runs10 --by module:", render_table(gpt2, "modules"), "",
             "gpt2_runs10 hotspots:", render_table(gpt2, n=6), "",
             "llama_sol findings:", render_findings(llama.findings().head(6), "plain",
                                                    llama.kernels)]
    check_golden("folded_and_op_specific.plain.txt", "\n".join(parts))


@pytest.mark.parametrize("fmt", FORMATS)
def test_every_format_renders(profile: Profile, fmt: str) -> None:
    text = render_table(profile, "hotspots", fmt, n=3)
    # LaTeX formats escape underscores (self\_attn), so look for plain words.
    assert "headroom" in text and "CatArrayBatchedCopy" in text
    assert len([line for line in text.splitlines() if "attn" in line]) >= 2


def test_hotspot_numbers_read_from_the_report(profile: Profile, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "1000")  # every column, no wrapping
    first = re.split(r"\s{2,}", render_table(profile, n=1).splitlines()[1].strip())
    # The cuDNN flash-attention backward: 19,872 ns, 18,162 ns recoverable, 8.6% of roof.
    assert first[:3] == ["1", "self_attn", "bwd"]
    assert first[-3:-1] == ["8.6", "18.16"]
    assert "19.87" in first and "7.8" in first


def test_reason_cut_in_text_next_step_whole_everywhere(
        profile: Profile, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "1000")  # every column, no wrapping
    rows = table_frame(profile, n=3)
    text = render_table(profile, n=3).splitlines()
    assert text[0].rstrip().endswith("next step")
    for line, row in zip(text[1:], rows.itertuples(index=False), strict=True):
        cells = re.split(r"\s{2,}", line.strip())
        # the reason keeps its first clauses that fit, else is cut at the width
        clause = row.reason.split("; ")[0]
        assert cells[-4] == (clause + "…" if len(clause) < REASON_WIDTH
                             else shorten(row.reason, REASON_WIDTH))
        assert cells[-1] == row.next_step  # the advice is never cut (it wraps to fit)
    read = pd.read_csv(write_table(profile, tmp_path / "h.csv", n=3))
    assert read["reason"].tolist() == rows["reason"].tolist()
    assert read["next_step"].tolist() == rows["next_step"].tolist()


def test_row_counts(profile: Profile) -> None:
    assert len(table_frame(profile, "hotspots")) == 10
    assert len(table_frame(profile, "launches")) == 40
    assert len(table_frame(profile, "modules")) == 21
    assert len(table_frame(profile, "modules", depth=0)) == 3
    assert len(table_frame(profile, "launches", n=5)) == 5
    shares = table_frame(profile, "launches")["pct_of_total"]
    assert shares.sum() == pytest.approx(100.0)


def test_labels_shown_only_when_they_differ(profile: Profile, sweep_profile: Profile) -> None:
    single = render_table(profile).splitlines()[0]
    several = render_table(sweep_profile).splitlines()[0]
    assert "variant" not in single and "shape" not in single
    assert "variant" in several and "shape" in several


@pytest.mark.parametrize("bad", [{"what": "flame"}, {"fmt": "latex_raw2"}, {"n": 0},
                                 {"order": "flops"}, {"depth": -1}])
def test_bad_arguments(profile: Profile, bad: dict) -> None:
    with pytest.raises(ValueError, match=next(iter(bad))):
        render_table(profile, **bad)


@pytest.mark.parametrize("what", [t for t in TABLES if t != "ranks"])
@pytest.mark.parametrize("suffix", [".csv", ".parquet", ".json", ".txt", ".md"])
def test_write_table(profile: Profile, tmp_path: Path, what: str, suffix: str) -> None:
    target = write_table(profile, tmp_path / f"table{suffix}", what)
    expected = table_frame(profile, what)
    if suffix == ".csv":
        read = pd.read_csv(target)
    elif suffix == ".parquet":
        read = pd.read_parquet(target)
    elif suffix == ".json":
        read = pd.DataFrame(json.loads(target.read_text(encoding="utf-8")))
    else:
        fmt = "plain" if suffix == ".txt" else "markdown"
        assert target.read_text(encoding="utf-8") == render_table(profile, what, fmt) + "\n"
        return
    assert len(read) == len(expected)
    assert list(read.columns) == list(expected.columns)
    column = {"modules": "inclusive_ns", "findings": "est_gain_ns"}.get(what, "duration_ns")
    assert read[column].sum() == pytest.approx(expected[column].sum())


def test_write_table_keeps_full_kernel_names(profile: Profile, tmp_path: Path) -> None:
    read = pd.read_csv(write_table(profile, tmp_path / "h.csv"))
    assert read["kernel"][0].endswith("cga1x1x1_kernel0_0")
    assert "…" in render_table(profile, n=1)


def test_write_table_rejects_unknown_suffix(profile: Profile, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"\.csv"):
        write_table(profile, tmp_path / "table.xlsx")


def test_units() -> None:
    assert format_us(19872.0) == "19.87"
    assert format_us(float("nan")) == "-"
    assert format_giga(3221225472.0) == "3.22"
    assert format_count(4.0) == "4" and format_count(2.5) == "2.5"
    assert format_rate(9.9e14, "FLOP/s") == "990 TFLOP/s"
    assert format_rate(4.81e12, "B/s") == "4.81 TB/s"
    assert shorten("abcdef", 4) == "abc…" and shorten(None, 4) == "-"


def test_by_is_not_a_sort_order(profile: Profile) -> None:
    # by= named the sort order in 0.1, a kind of row elsewhere: it went before 1.0
    with pytest.raises(TypeError, match="by"):
        render_table(profile, "hotspots", by="time", n=5)  # type: ignore[call-arg]

