"""Compiled models live on the GPU: Inductor's kernels in their modules under the timeline
and under Nsight Compute (``torch_nsight.sweep`` of a compiled factory completes)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import torch_nsight
from torch_nsight.analyze import UNATTRIBUTED


def _compiled_gpt2() -> torch.nn.Module:
    from examples.models import GPT2Small

    return torch.compile(GPT2Small(n_layer=2, d=256, heads=4, vocab=4096))


def _ids(shape: tuple[int, int]) -> torch.Tensor:
    return torch.randint(0, 4096, shape)


def _check(profile: torch_nsight.Profile, *, backward: bool) -> None:
    k = profile.kernels
    inductor = k["kernel_full"].str.startswith("triton_")
    assert inductor.sum() > 5, "the model did not run compiled"
    assert (k.loc[inductor, "module"] != UNATTRIBUTED).all()
    assert profile.coverage >= 0.95
    assert "h.1.mlp" in " ".join(k["module"].astype(str))  # down to the blocks' parts
    if backward:
        assert set(k.loc[inductor, "direction"]) == {"fwd", "bwd"}


@pytest.mark.gpu
def test_a_compiled_training_step_under_the_timeline(tmp_path: Path) -> None:
    profile = torch_nsight.timeline(_compiled_gpt2, {"4x128": (4, 128)}, make_inputs=_ids,
                                    backward=True, dtype="bf16", runs=2, warmup=3,
                                    output_dir=tmp_path / "tl", quiet=True)
    _check(profile, backward=True)


@pytest.mark.gpu
def test_a_sweep_of_a_compiled_factory_completes_and_is_attributed(tmp_path: Path) -> None:
    profile = torch_nsight.sweep(_compiled_gpt2, {"4x128": (4, 128)}, make_inputs=_ids,
                                 backward=True, dtype="bf16", output_dir=tmp_path / "sw",
                                 quiet=True, timeout=300)
    _check(profile, backward=True)


@pytest.mark.gpu
def test_profile_compiles_what_the_compiled_script_alone_compiles(tmp_path: Path) -> None:
    """Issue 44: a model compiled whole (Inductor), called with keyword arguments, with graph
    breaks of its own, under `torch-nsight profile` (Nsight Compute): Dynamo's recompiles,
    graph breaks, graphs and frames at the profiled step equal the script's alone."""
    import os
    import re
    import subprocess
    import sys

    here = Path(__file__).resolve().parents[1] / "capture"
    root = here.parents[1]
    script = [sys.executable, str(here / "compiled_seq2seq.py"), "cuda"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(root), str(here), os.environ.get("PYTHONPATH", "")])}
    env.pop("TORCH_NSIGHT_INSTRUMENT", None)
    alone = subprocess.run(script, capture_output=True, text=True, cwd=tmp_path, env=env,
                           timeout=600)
    assert alone.returncode == 0, alone.stdout + alone.stderr
    profiled = subprocess.run(
        [sys.executable, "-m", "torch_nsight", "profile", "--steps", "3:4", "--out",
         str(tmp_path / "out"), "--", *script],
        capture_output=True, text=True, cwd=tmp_path, env=env, timeout=600)
    output = profiled.stdout + profiled.stderr
    assert profiled.returncode == 0, output

    def step_lines(text: str) -> dict[str, str]:
        return dict(re.findall(r"^step (\d+): instrumented \w+, (.*)$", text, re.M))

    assert step_lines(output)["3"] == step_lines(alone.stdout)["3"], output
    assert "recompile_limit" not in output and "no calls table" not in output, output
    profile = torch_nsight.load(tmp_path / "out", cache=False)
    k = profile.kernels
    named = k["module"].notna() & (k["module"] != UNATTRIBUTED)
    assert k.loc[named, "duration_ns"].sum() >= 0.95 * k["duration_ns"].sum()
