"""torch-nsight findings and report --findings on the recorded fixtures (CPU)."""

from __future__ import annotations

import io
from pathlib import Path

import pandas as pd
import pytest

from torch_nsight.cli.main import main

DATA = Path(__file__).resolve().parents[1] / "data"


def test_findings_as_csv_carry_every_column(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["findings", str(DATA / "findings_gemm"), "--format", "csv"]) == 0
    out = capsys.readouterr()
    frame = pd.read_csv(io.StringIO(out.out))
    assert frame.loc[0, "finding"] == "gemm_misaligned" and frame.loc[0, "module"] == "proj"
    assert "50304" in frame.loc[0, "fix"] and frame.loc[0, "variant"] == "n50257"
    assert "NVIDIA H200" in out.err  # the summary line goes to standard error


def test_findings_as_csv_give_their_parameters_and_facts_as_json(
        capsys: pytest.CaptureFixture[str]) -> None:
    """A csv reader gets fix_params and facts back as JSON, not as Python's repr."""
    import json

    assert main(["findings", str(DATA / "zoo_families" / "deeplab.ncu-rep.xz"), "--format",
                 "csv", "-n", "20"]) == 0
    frame = pd.read_csv(io.StringIO(capsys.readouterr().out))
    optimizer = frame[frame["finding"].eq("optimizer_not_fused")].iloc[0]
    assert json.loads(optimizer["fix_params"])["optimizer"] == "SGD"
    facts = [json.loads(text) for text in frame["facts"].dropna()]
    assert facts and all(isinstance(fact, dict) for fact in facts)


def test_markdown_for_a_pull_request(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["findings", str(DATA / "findings_chain"), "--format", "markdown"]) == 0
    text = capsys.readouterr().out
    assert "## Findings" in text and "| 1 " in text and "`elementwise_chain`" in text


def test_benchmark_without_a_gpu_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("torch")
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is here: tests/gpu/test_verify_gpu.py covers --benchmark")
    assert main(["findings", str(DATA / "findings_gemm"), "--benchmark"]) == 1
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("torch-nsight: error:") and "CUDA GPU" in line


def test_verify_always_means_the_users_script(capsys: pytest.CaptureFixture[str]) -> None:
    # --verify times fixes on the script's own steps (as profile --verify does); the
    # micro-benchmark on fresh tensors is --benchmark
    assert main(["findings", str(DATA / "findings_gemm"), "--verify"]) == 1
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "--command" in line and "--benchmark" in line
    assert main(["findings", str(DATA / "findings_gemm"), "--benchmark", "--verify",
                 "--command", "python x.py", "--steps", "3:5"]) == 1
    assert "give one" in capsys.readouterr().err


def test_report_prints_findings_under_or_as_the_table(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", str(DATA / "findings_conv"), "--findings", "--top", "3"]) == 0
    under = capsys.readouterr().out
    assert "Findings (ranked by the time they recover):" in under
    assert "layout_conversion" in under
    assert main(["report", str(DATA / "findings_conv"), "--by", "finding", "--format",
                 "json"]) == 0
    rows = pd.read_json(io.StringIO(capsys.readouterr().out))
    assert rows.loc[0, "finding"] == "layout_conversion" and rows.loc[0, "variant"] == "nchw"
    assert "channels_last" in rows.loc[0, "fix"]


@pytest.mark.slow
def test_the_command_words_its_findings_in_a_process_of_its_own(tmp_path: Path) -> None:
    """In a fresh process (no test module has imported render), the findings command still
    gets its words from render: no warning that they are missing, and the fixes worded."""
    import os
    import subprocess
    import sys

    report = Path(__file__).resolve().parents[1] / "data" / "outside_lstm" / "profile.ncu-rep.xz"
    done = subprocess.run([sys.executable, "-m", "torch_nsight", "findings", str(report)],
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, "TORCH_NSIGHT_CACHE_DIR": str(tmp_path)})
    assert done.returncode == 0, done.stderr
    assert "not imported" not in done.stderr
    assert "fused=True" in done.stdout  # the AdamW step's fix, worded
