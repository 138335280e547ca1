"""The dry run (profiler=None): the same child path without ncu, on the CPU."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
import torch

import torch_nsight
from torch_nsight.collect.shared import job as jobs
from torch_nsight.errors import ShapeFailedError
from torch_nsight.profile import KERNEL_COLUMNS

from .models import Stack, TwoInputs, make_inputs_failing_on_4, make_inputs_hanging_on_3


def statuses(profile) -> dict[tuple[str | None, str], str]:
    return {(r["variant"] or None, r["shape"]): r["status"] for r in profile.results}


@pytest.mark.slow
def test_variants_shapes_backward_runs(tmp_path: Path, monkeypatch) -> None:
    made: list[Path] = []
    real = jobs.make_private_dir
    monkeypatch.setattr(jobs, "make_private_dir", lambda: made.append(real()) or made[-1])
    width = 16

    def factory() -> torch.nn.Module:
        return Stack(layers=3, d=width)

    profile = torch_nsight.sweep({"module": Stack(4), "factory": factory, "class": Stack},
                                 [(2, 16), (3, 5, 16)], backward=True, runs=2, warmup=1,
                                 dtype="float64", output_dir=tmp_path / "out", quiet=True,
                                 profiler=None)
    assert statuses(profile) == {(v, s): "ok" for v in ("module", "factory", "class")
                                 for s in ("2x16", "3x5x16")}
    assert profile.kernels.empty and set(KERNEL_COLUMNS) <= set(profile.kernels.columns)
    assert profile.meta.sweeps[0].dry_run is True and profile.failures == []
    assert profile.shapes == ["2x16", "3x5x16"]
    assert profile.variants == ["module", "factory", "class"]
    first = profile.results[0]
    assert first["runs"] == 2 and first["outputs"] == "(2, 16) float64"
    # the dtype was applied and identical layers were found: h.0 gets no input gradient
    # (its input needs none), so h.1 represents h.2 and h.3
    groups = first["replication"]["groups"]
    assert groups[0]["representative"] == "h.1" and groups[0]["replicas"] == ["h.2", "h.3"]
    assert any("h.0 (" in line for line in first["replication"]["mismatches"])
    out = tmp_path / "out"
    assert json.loads((out / "job.json").read_text())["options"]["runs"] == 2
    assert json.loads((out / "sweep.result.json").read_text())["finished"] is True
    assert (out / "sweep.log").is_file()
    assert made and not made[0].exists()  # the job file's private directory is gone


@pytest.mark.slow
def test_make_inputs_kwargs_and_named_configs() -> None:
    def make_inputs(config: dict) -> dict:
        return {"x": torch.randn(config["batch"], 16), "scale": torch.tensor(2.0)}

    profile = torch_nsight.sweep(TwoInputs(), {"small": {"batch": 1}, "big": {"batch": 8}},
                                 make_inputs=make_inputs, replicate=False, quiet=True,
                                 profiler=None)
    assert statuses(profile) == {(None, "small"): "ok", (None, "big"): "ok"}
    assert profile.results[1]["outputs"] == "(8, 16) float32"
    assert "replication" not in profile.results[0]


@pytest.mark.slow
def test_failing_shape_keeps_the_others(caplog) -> None:
    with caplog.at_level(logging.WARNING):
        profile = torch_nsight.sweep(Stack(2), [(2, 16), (4, 16), (5, 16)],
                                     make_inputs=make_inputs_failing_on_4, replicate=False,
                                     quiet=True, profiler=None)
    assert statuses(profile) == {(None, "2x16"): "ok", (None, "4x16"): "failed",
                                 (None, "5x16"): "ok"}
    (failure,) = profile.failures
    assert failure["shape"] == "4x16" and "out of memory" in failure["error"]
    failing = [r for r in caplog.records
               if "4x16" in r.getMessage() and "out of memory" in r.getMessage()]
    assert len(failing) == 1  # said once, not once by the launcher and again at the end


@pytest.mark.slow
def test_every_shape_failing_raises_and_the_directory_says_why(tmp_path: Path) -> None:
    with pytest.raises(ShapeFailedError, match="4x16.*out of memory"):
        torch_nsight.sweep(Stack(2), [(4, 16)], make_inputs=make_inputs_failing_on_4,
                           replicate=False, quiet=True, profiler=None,
                           output_dir=tmp_path / "out")
    after = torch_nsight.load(tmp_path / "out")
    (failure,) = after.failures
    assert failure["shape"] == "4x16" and "out of memory" in failure["error"]


@pytest.mark.slow
def test_hung_shape_times_out_and_the_rest_run() -> None:
    profile = torch_nsight.sweep(Stack(2), [(2, 16), (3, 16), (5, 16)], timeout=3,
                                 make_inputs=make_inputs_hanging_on_3, replicate=False,
                                 quiet=True, profiler=None)
    assert statuses(profile) == {(None, "2x16"): "ok", (None, "3x16"): "timeout",
                                 (None, "5x16"): "ok"}
    assert "timeout" in profile.failures[0]["error"]


@pytest.mark.slow
def test_devices_spread_shapes_over_children() -> None:
    profile = torch_nsight.sweep(Stack(2), [(1, 16), (2, 16), (3, 16)], devices=[0, 1],
                                 replicate=False, quiet=True, profiler=None)
    children = {r["shape"]: r["child"] for r in profile.results}
    assert children == {"1x16": "sweep-gpu0", "2x16": "sweep-gpu1", "3x16": "sweep-gpu0"}
    assert set(statuses(profile).values()) == {"ok"}


@pytest.mark.parametrize(("kwargs", "error", "match"), [
    ({"shapes": [("a", "b")]}, ValueError, "make_inputs"),
    ({"warmup": -1}, ValueError, "warmup"),
    ({"runs": 0}, ValueError, "runs"),
    ({"timeout": 0}, ValueError, "timeout"),
    ({"backward": 1}, TypeError, "backward"),
    ({"profiler": "nsys"}, ValueError, "profiler"),
    ({"devices": 0}, ValueError, "devices"),
    ({"derive": {"x": 3}}, TypeError, "derive"),
    ({"metric_set": "quickest"}, ValueError, "metric_set"),
    ({"metric_set": ["fast"]}, ValueError, "is a metric set, not an ncu metric"),
    ({"model": {"a/b": Stack}}, ValueError, "variant label"),
    ({"model": 3}, TypeError, "nn.Module"),
    ({"dtype": "int4"}, ValueError, "dtype"),
])
def test_arguments_checked_at_the_front_door(kwargs, error, match) -> None:
    args = {"model": Stack, "shapes": [(1, 16)], "profiler": None, "quiet": True, **kwargs}
    with pytest.raises(error, match=match):
        torch_nsight.sweep(args.pop("model"), args.pop("shapes"), **args)


def cudnn_factory() -> torch.nn.Module:
    # touching torch.backends.cudnn made the job unpicklable ("cannot pickle 'CudnnModule'")
    torch.backends.cudnn.benchmark = True
    return Stack(layers=2, d=16)


@pytest.fixture
def tf32_on():
    from torch_nsight.capture.calls.settings import apply_settings, read_settings

    before = read_settings()
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.deterministic = True
    try:
        yield
    finally:
        apply_settings(before)


@pytest.mark.slow
def test_the_child_runs_the_users_settings_and_records_calls(tmp_path: Path, tf32_on) -> None:
    profile = torch_nsight.sweep(cudnn_factory, [(4, 16)], backward=True, warmup=0,
                                 output_dir=tmp_path / "out", quiet=True, profiler=None)
    assert statuses(profile) == {(None, "4x16"): "ok"}
    # recorded in the child, after its factory ran: the parent's TF32 and deterministic
    # switches arrived there (apply_settings), and the factory's cudnn.benchmark shows too
    settings = profile.meta.settings
    assert settings["cudnn.deterministic"] is True and settings["cudnn.benchmark"] is True
    assert "TF32" in settings["summary"] and "cudnn.benchmark" in settings["summary"]
    assert "TF32" in profile.describe()
    # the calls table: every Linear's forward GEMM at the shape the child ran, 2*M*N*K FLOPs,
    # and the backward GEMMs under bwd: ranges, joined to kernels by module path
    calls = profile.calls
    assert calls is not None and set(calls["shape"]) == {"4x16"}
    forward = calls[(calls["direction"] == "fwd") & calls["aten_op"].isin(["addmm", "mm"])]
    layers = ["h.0.fc1", "h.0.fc2", "h.1.fc1", "h.1.fc2"]
    assert sorted(set(forward["module"])) == layers
    d = 16  # Block(d): fc1 is d -> 2d, fc2 is 2d -> d; a batch of 4 rows
    for row in forward.itertuples():
        assert row.flops == 2 * 4 * d * (2 * d) and row.module_path.endswith(row.module)
    backward = calls[calls["direction"] == "bwd"]
    assert set(backward["module"]) >= set(layers)
    # each call carries its module's class, forward and backward alike
    linears = calls[calls["module"].isin(layers)]
    assert set(linears["module_class"]) == {"torch.nn.modules.linear.Linear"}
    # the directory reads back whole, and its saved profile too
    again = torch_nsight.load(tmp_path / "out")
    assert again.results == profile.results and len(again.calls) == len(calls)
    saved = torch_nsight.load(tmp_path / "out" / "profile.parquet")
    assert saved.meta.settings == settings and len(saved.calls) == len(calls)
    assert saved.calls["module_class"].fillna("").tolist() == calls["module_class"].fillna("").tolist()


@pytest.fixture(scope="module")
def without_calls() -> torch_nsight.Profile:
    """A dry run with ``record_calls=False`` (a child process: seconds), read by two tests."""
    return torch_nsight.sweep(Stack(2), [(2, 16)], warmup=0, quiet=True, profiler=None,
                              record_calls=False)


def test_record_calls_off_leaves_no_calls_table(without_calls: torch_nsight.Profile) -> None:
    assert without_calls.calls is None


@pytest.mark.slow
def test_the_default_metric_set_is_fast_or_lean_without_calls(
        without_calls: torch_nsight.Profile) -> None:
    with_calls = torch_nsight.sweep(Stack(2), [(2, 16)], warmup=0, quiet=True, profiler=None)
    without = without_calls
    assert with_calls.meta.sweeps[0].options["metric_set"] == "fast"
    # no calls table to count FLOPs from: the FLOP counters are collected instead
    assert without.meta.sweeps[0].options["metric_set"] == "lean"


def test_fast_without_a_calls_table_is_warned_about(caplog) -> None:
    with caplog.at_level(logging.WARNING, logger="torch_nsight"):
        profile = torch_nsight.sweep(Stack(2), [(2, 16)], warmup=0, quiet=True, profiler=None,
                                     record_calls=False, metric_set="fast")
    assert profile.meta.sweeps[0].options["metric_set"] == "fast"  # as asked
    assert any("record_calls=False turns off" in r.getMessage() for r in caplog.records)
