"""torch_nsight.timeline() on the CPU: its arguments (models named by file), ``runs`` and the
deprecated ``steps``."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

import torch_nsight
from torch_nsight.analyze import timeline_findings, timeline_summary

#: A training step's timeline recorded on an H200 (tests/data/README.md).
GPU_TIMELINE = Path(__file__).resolve().parents[1] / "data" / "timeline_train"


def _model() -> object:
    import torch

    return torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU())


def _inputs(shape: tuple[int, ...]) -> object:
    import torch

    return torch.ones(shape)


def test_runs_is_the_number_of_profiled_steps(tmp_path: Path) -> None:
    # the model and its inputs named as the command line names them, from this file
    profile = torch_nsight.timeline(f"{__file__}:_model", {"2x8": (2, 8)}, warmup=0, runs=2,
                                    make_inputs=f"{__file__}:_inputs", output_dir=tmp_path,
                                    quiet=True)
    steps = profile.timeline[profile.timeline["kind"] == "step"]
    assert steps["run"].tolist() == [0, 1]
    # a trace without GPU activity (this CPU) gets no verdict and no finding, alone or
    # beside one recorded on a GPU, whose verdict it leaves as it was
    assert profile.kernels.empty
    assert timeline_summary(profile.kernels, profile.timeline).empty
    assert timeline_findings(profile.kernels, profile.timeline).empty
    gpu = torch_nsight.load(GPU_TIMELINE)
    both = torch_nsight.load([tmp_path, GPU_TIMELINE])
    alone = timeline_summary(gpu.kernels, gpu.timeline)
    assert alone["shape"].tolist() == ["8x512"]
    pd.testing.assert_frame_equal(timeline_summary(both.kernels, both.timeline), alone)
    assert timeline_findings(both.kernels, both.timeline)["shape"].unique().tolist() == ["8x512"]


def test_runs_counts_the_measured_iterations(tmp_path: Path) -> None:
    profile = torch_nsight.timeline(_model, {"2x8": (2, 8)}, warmup=0, runs=2,
                                    output_dir=tmp_path, quiet=True)
    steps = profile.timeline[profile.timeline["kind"] == "step"]
    assert steps["run"].tolist() == [0, 1]
    with pytest.raises(TypeError, match="steps"):  # its former name, gone before 1.0
        torch_nsight.timeline(_model, {"2x8": (2, 8)}, steps=2)  # type: ignore[call-arg]


@pytest.mark.parametrize("count", [{"runs": 0}, {"runs": 1.5}])
def test_a_bad_count_names_runs(count: dict[str, object]) -> None:
    with pytest.raises(ValueError, match="runs must be an integer >= 1"):
        torch_nsight.timeline(_model, [(2, 8)], **count)  # type: ignore[arg-type]


def _broken() -> object:
    raise RuntimeError("no such weights")


def test_a_failed_variant_is_in_the_profile_and_every_failure_raises(tmp_path: Path) -> None:
    profile = torch_nsight.timeline({"ok": _model, "bad": f"{__file__}:_broken"}, [(2, 8)],
                                    warmup=0, runs=1, output_dir=tmp_path / "some",
                                    quiet=True)
    assert [(r["variant"], r["status"]) for r in profile.results] == [("ok", "ok"),
                                                                      ("bad", "failed")]
    (failure,) = profile.failures
    assert failure["variant"] == "bad" and failure["shape"] == "2x8"
    assert failure["error"] == "RuntimeError: no such weights"
    # none ran: the error says why, not that a (temporary) folder holds no trace
    with pytest.raises(torch_nsight.ShapeFailedError,
                       match=r"^every shape failed: 2x8: RuntimeError: no such weights$"):
        torch_nsight.timeline(_broken, [(2, 8)], warmup=0, runs=1, quiet=True)
