"""torch_nsight.timeline() on the CPU: its arguments (models named by file), ``runs`` and the
deprecated ``steps``."""

from __future__ import annotations

from pathlib import Path

import pytest

import torch_nsight


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


def test_steps_is_the_deprecated_name_of_runs(tmp_path: Path) -> None:
    with pytest.warns(DeprecationWarning, match="runs="):
        profile = torch_nsight.timeline(_model, {"2x8": (2, 8)}, warmup=0, steps=2,
                                        output_dir=tmp_path, quiet=True)
    steps = profile.timeline[profile.timeline["kind"] == "step"]
    assert steps["run"].tolist() == [0, 1]


@pytest.mark.parametrize("count", [{"runs": 0}, {"runs": 1.5}])
def test_a_bad_count_names_runs(count: dict[str, object]) -> None:
    with pytest.raises(ValueError, match="runs must be an integer >= 1"):
        torch_nsight.timeline(_model, [(2, 8)], **count)  # type: ignore[arg-type]
