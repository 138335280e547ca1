"""Zeros where a number divides (issue 45): zero kernel durations (once a ZeroDivisionError
in ``--findings`` and ``% of roof inf``), peaks and clocks of zero (once a
ZeroDivisionError in ``--plot``), a step without kernels (once "0 kernels, nan% of them")
and a baseline that took no time (once ``+inf%`` in ``compare``) end in clear output: no
traceback, no ``nan`` or ``inf`` printed. The zeros are planted in real recordings:
tests/data/hand_s128.ncu-rep.xz's loaded profile and tests/data/timeline_train's trace."""

from __future__ import annotations

import gzip
import json
import logging
import math
import re
import shutil
from pathlib import Path

import pandas as pd
import pytest

import torch_nsight
from tests.recorded import load_recorded
from torch_nsight.analyze import compare_profiles
from torch_nsight.analyze.changes import changed_rows, largest_change
from torch_nsight.render.comparison import changes_table, verdict_line
from torch_nsight.report.source_base import RATE_COLUMNS, check_times

from .conftest import run_main

DATA = Path(__file__).resolve().parents[1] / "data"
REPORT = DATA / "hand_s128.ncu-rep.xz"
TRACE = DATA / "timeline_train" / "trace-0.json.gz"
#: ``nan`` or ``inf`` printed as a number.
PRINTED = re.compile(r"(?<![\w.])[-+]?(nan|inf)(?![\w.])%?", re.IGNORECASE)


@pytest.fixture(scope="module")
def loaded() -> torch_nsight.Profile:
    return load_recorded(REPORT)


def _saved(profile: torch_nsight.Profile, folder: Path, name: str,
           change: dict[str, object], rows: pd.Series | None = None) -> Path:
    kernels = profile.kernels.copy()
    chosen = rows if rows is not None else pd.Series(True, index=kernels.index)
    for column, value in change.items():
        kernels.loc[chosen, column] = value
    copy = torch_nsight.Profile(kernels, profile.meta, profile.calls)
    return copy.save(folder / name)


def _clean(status: int, out: str, err: str) -> None:
    assert status == 0, err
    assert "Traceback" not in err and PRINTED.search(out) is None, out


@pytest.mark.parametrize("which", ["all", "mlp"])
def test_zero_durations_are_left_out_with_a_warning(
        loaded: torch_nsight.Profile, which: str, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        caplog: pytest.LogCaptureFixture) -> None:
    rows = None if which == "all" else loaded.kernels["module_path"].astype(str).str.contains(
        "/mlp")
    path = _saved(loaded, tmp_path, "zero.parquet", {"duration_ns": 0.0}, rows)
    zeros = len(loaded.kernels) if rows is None else int(rows.sum())
    for argv in (["report", str(path), "--findings"], ["findings", str(path)],
                 ["report", str(path), "--by", "module"]):
        status, out, err = run_main(argv, tmp_path, monkeypatch, capsys)
        _clean(status, out, err)
        assert (f"{zeros} kernels with invalid durations (zero, negative or missing) left "
                "out") in caplog.text


def test_a_trace_with_zero_kernel_durations(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                            capsys: pytest.CaptureFixture[str],
                                            caplog: pytest.LogCaptureFixture) -> None:
    with gzip.open(TRACE, "rt", encoding="utf-8") as handle:
        document = json.load(handle)
    kernels = [e for e in document["traceEvents"] if e.get("cat") == "kernel"]
    for event in kernels[::2]:
        event["dur"] = 0
    path = tmp_path / "trace.json"
    path.write_text(json.dumps(document))
    status, out, err = run_main(["report", str(path), "--findings"], tmp_path, monkeypatch,
                                capsys)
    _clean(status, out, err)
    assert f"{len(kernels[::2])} kernels with invalid durations" in caplog.text


def test_peaks_and_clocks_of_zero_are_unknown_and_the_plot_is_drawn(
        loaded: torch_nsight.Profile, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture) -> None:
    columns = [c for c in loaded.kernels.columns
               if c in RATE_COLUMNS or c in ("peak_flops_per_s", "peak_bytes_per_s")]
    path = _saved(loaded, tmp_path, "zero_peaks.parquet", dict.fromkeys(columns, 0.0))
    status, out, err = run_main(["report", str(path), "--findings", "--plot", "roof.png"],
                                tmp_path, monkeypatch, capsys)
    _clean(status, out, err)
    assert (tmp_path / "roof.png").stat().st_size > 0
    assert f"{len(loaded.kernels)} kernels with peaks or clocks of zero or less" in caplog.text


def test_check_times_reads_zero_rates_as_unknown(loaded: torch_nsight.Profile,
                                                 caplog: pytest.LogCaptureFixture) -> None:
    frame = loaded.kernels.head(3).copy()
    frame.loc[frame.index[0], "sm_clock_hz"] = 0.0
    frame.loc[frame.index[1], "peak_dram_bytes_per_cycle"] = -1.0
    with caplog.at_level(logging.WARNING, logger="torch_nsight"):
        checked = check_times(frame, "run.ncu-rep")
    assert len(checked) == 3
    assert math.isnan(checked["sm_clock_hz"].iat[0])
    assert math.isnan(checked["peak_dram_bytes_per_cycle"].iat[1])
    assert checked["sm_clock_hz"].iat[2] == frame["sm_clock_hz"].iat[2]
    assert "run.ncu-rep: 2 kernels with peaks or clocks of zero or less" in caplog.text


def test_a_step_without_kernels_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    with gzip.open(TRACE, "rt", encoding="utf-8") as handle:
        document = json.load(handle)
    document["traceEvents"] = [e for e in document["traceEvents"] if e.get("cat") != "kernel"]
    path = tmp_path / "trace.json"
    path.write_text(json.dumps(document))
    status, out, err = run_main(["report", str(path)], tmp_path, monkeypatch, capsys)
    _clean(status, out, err)
    assert "with no kernel (copies and memsets only)" in out
    assert "0 kernels, " not in out


def test_a_baseline_of_no_time_has_no_percentage(loaded: torch_nsight.Profile,
                                                 tmp_path: Path) -> None:
    """A module whose baseline kernels have no duration (a report without the metric sums
    them to 0 ns): regressed beyond any threshold, its change % unknown, never inf."""
    baseline = loaded.kernels.copy()
    baseline.loc[baseline["module_path"].astype(str).str.contains("/mlp"), "duration_ns"] = \
        math.nan
    rows = compare_profiles(baseline, loaded.kernels, by="module", threshold=5)
    mlp = rows[rows["module_path"] == "LlamaBlock/mlp"]
    assert (mlp["baseline_ns"] == 0).all() and mlp["change_pct"].isna().all()
    assert set(mlp["verdict"]) == {"regressed"}
    assert not rows["change_pct"].abs().eq(math.inf).any()
    changed = changed_rows(rows, baseline, loaded.kernels)
    line = verdict_line(rows, largest_change(changed), 5, "module")
    assert line.endswith("largest: mlp bwd +37.31 µs (from no time)")
    table = changes_table(changed, "module", "plain", 120)
    assert PRINTED.search(line + table) is None


def test_compare_of_a_current_with_zero_durations_names_it(
        loaded: torch_nsight.Profile, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    path = _saved(loaded, tmp_path, "zero.parquet", {"duration_ns": 0.0})
    baseline = tmp_path / REPORT.name
    shutil.copy(REPORT, baseline)
    status, out, err = run_main(["compare", str(baseline), str(path)], tmp_path, monkeypatch,
                                capsys)
    assert status == 1 and out == "" and PRINTED.search(err) is None
    assert "the current profile (CURRENT) cannot be compared" in err


def test_a_step_the_gpu_never_idles_in(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    """Each run's first kernel stretched over the whole run: the GPU never idles, so there
    is no idle time to share among the modules (once a ZeroDivisionError in the verdict),
    and no finding of idle time."""
    with gzip.open(TRACE, "rt", encoding="utf-8") as handle:
        document = json.load(handle)
    events = document["traceEvents"]
    kernels = [e for e in events if e.get("cat") == "kernel"]
    for run in (e for e in events if str(e.get("name", "")).startswith("torch_nsight/sweep;")):
        first = next(k for k in kernels if run["ts"] <= k["ts"] <= run["ts"] + run["dur"])
        first.update(ts=run["ts"], dur=run["dur"])
    path = tmp_path / "trace.json"
    path.write_text(json.dumps(document))
    status, out, err = run_main(["report", str(path)], tmp_path, monkeypatch, capsys)
    _clean(status, out, err)
    verdict = out[out.index("Timeline verdict"):]
    assert "GPU-bound" in verdict and "The GPU was busy 100.0%" in verdict
    assert "small_kernels" not in verdict and "gpu_idle" not in verdict
    assert "Try: The GPU is the limit" in verdict
