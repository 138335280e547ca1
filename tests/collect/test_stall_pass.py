"""The focused second pass's plan (``profile --stalls``), built from a real first pass (the
recorded ViT-S step) without running ncu, and what happens when it fails."""

from __future__ import annotations

from pathlib import Path

import pytest

import torch_nsight
from torch_nsight.analyze.stalls import stall_targets
from torch_nsight.collect.parent import stall_pass
from torch_nsight.collect.parent.script import plan_script
from torch_nsight.collect.parent.stall_pass import kernel_filter, plan_stall_pass, run_stall_pass
from torch_nsight.environment import STATUS_ENV, STEPS_ENV, Steps
from torch_nsight.errors import TorchNsightError
from torch_nsight.metrics import METRIC_SETS, METRICS, STALL_PASS

VIT = Path(__file__).resolve().parents[1] / "data" / "latency" / "vit_s.ncu-rep.xz"
COMMAND = ["python", "train.py", "--lr", "3e-4"]


@pytest.fixture(scope="module")
def vit() -> torch_nsight.Profile:
    return torch_nsight.load(VIT)


def _option(command: list[str], name: str) -> str:
    return command[command.index(name) + 1]


def test_the_second_pass_is_the_first_on_fewer_kernels_with_other_metrics(
        tmp_path: Path, vit: torch_nsight.Profile) -> None:
    report = tmp_path / "out" / "report.ncu-rep"
    first = plan_script(COMMAND, report, ncu="ncu", metric_set="fast", steps=Steps(12, 13),
                        kernel_name="gemm", ncu_args=["--cache-control", "none"])
    names = list(stall_targets(vit.kernels)["function"])
    second = plan_stall_pass(first, names, ncu="ncu", ncu_args=["--cache-control", "none"])
    command = second.ncu_command
    assert command[-len(COMMAND):] == COMMAND
    assert _option(command, "-o") == str(tmp_path / "out" / "stalls" / "report")
    assert second.report == tmp_path / "out" / "stalls" / "report.ncu-rep"
    # the same steps, the same replicas left out, the user's own ncu arguments
    for option in ("--nvtx-include", "--nvtx-exclude", "--cache-control"):
        assert _option(command, option) == _option(first.ncu_command, option)
    assert second.env[STEPS_ENV] == first.env[STEPS_ENV] == "12:13"
    assert second.env[STATUS_ENV] != first.env[STATUS_ENV]
    # only the chosen names, by ncu's function name: the first pass's -k is not carried
    assert command.count("-k") == 1 and _option(command, "-k") == kernel_filter(names)
    assert _option(command, "--kernel-name-base") == "function"
    assert _option(command, "--metrics").split(",") == list(STALL_PASS.metrics)
    # nothing of the fast set again but the duration and the scheduler's three figures
    # (free in any pass; a first pass of another set lacks them)
    scheduler = {m.name for m in METRICS if m.kind == "scheduler"}
    assert len(scheduler) == 3
    assert not (set(METRIC_SETS["fast"].metrics) - {"gpu__time_duration.sum"} - scheduler
                ) & set(second.metrics)
    assert _option(command, "--filter-mode") == "per-launch-config"
    assert _option(command, "-c") == "1"
    assert second.metric_set == "stalls" and "--section" not in command


def test_a_failed_second_pass_keeps_the_first(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                              vit: torch_nsight.Profile) -> None:
    first = plan_script(COMMAND, tmp_path / "report.ncu-rep", ncu="ncu", metric_set="fast",
                        steps=Steps(12, 13))

    def fails(plan: object) -> None:
        raise TorchNsightError("ncu wrote no report (exit status 1)")

    monkeypatch.setattr(stall_pass, "run_script", fails)
    done = run_stall_pass(first, vit, ncu="ncu")
    assert done.profile is vit
    assert done.failed is not None and "no report" in done.failed
    assert done.functions == tuple(stall_targets(vit.kernels)["function"])

    def interrupted(plan: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(stall_pass, "run_script", interrupted)
    assert run_stall_pass(first, vit, ncu="ncu").profile is vit


def test_nothing_latency_bound_runs_no_second_pass(tmp_path: Path,
                                                   vit: torch_nsight.Profile) -> None:
    first = plan_script(COMMAND, tmp_path / "report.ncu-rep", ncu="ncu", metric_set="fast",
                        steps=Steps(12, 13))
    busy = torch_nsight.Profile(vit.kernels.assign(bound="compute"), vit.meta, vit.calls)
    done = run_stall_pass(first, busy, ncu="ncu")
    assert done.profile is busy and done.failed == "no latency-bound kernel in the first pass"
