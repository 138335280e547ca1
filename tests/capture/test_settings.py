"""Reading, applying and describing the process-global PyTorch switches."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from torch_nsight.capture.calls.settings import (
    SETTING_KEYS,
    apply_settings,
    describe_settings,
    read_settings,
)

REPO = Path(__file__).resolve().parents[2]

# Other valid values of the string switches, for the round trips.
CHOICES: dict[str, list[str]] = {
    "float32_matmul_precision": ["highest", "high", "medium"],
    "fp32_precision": ["ieee", "tf32"],
    "cudnn.fp32_precision": ["ieee", "tf32"],
    "cuda.matmul.fp32_precision": ["ieee", "tf32"],
    "cudnn.conv.fp32_precision": ["ieee", "tf32"],
    "cudnn.rnn.fp32_precision": ["ieee", "tf32"],
    "mkldnn.fp32_precision": ["ieee", "bf16"],
    "mkldnn.matmul.fp32_precision": ["ieee", "bf16"],
    "mkldnn.conv.fp32_precision": ["ieee", "bf16"],
    "mkldnn.rnn.fp32_precision": ["ieee", "bf16"],
    "cudnn.depthwise_kernel": ["auto", "cudnn", "native"],
    "cuda.preferred_blas_library": ["cublas", "cublaslt"],
    "cuda.preferred_linalg_library": ["default", "cusolver"],
    "default_dtype": ["float32", "float64"],
}
# Switches a CPU-only build refuses to change (the library is not compiled in).
NEEDS_CUDA = {"cuda.preferred_blas_library", "cuda.preferred_linalg_library"}


@pytest.fixture(autouse=True)
def restore_global_settings() -> Iterator[dict[str, Any]]:
    """Put every switch back as it was, and fail if that did not work."""
    saved = read_settings()
    default_dtype = torch.get_default_dtype()
    yield saved
    torch.set_default_dtype(default_dtype)
    skipped = apply_settings(saved)
    assert skipped == [] and read_settings() == saved, "global settings were not restored"


def other_value(key: str, value: Any) -> Any:
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 1
    return next(choice for choice in CHOICES[key] if choice != value)


def changes_for(key: str, before: dict[str, Any]) -> dict[str, Any]:
    """A valid change of ``key``: split-K reduction off needs reduced precision off too."""
    new = other_value(key, before[key])
    if key.endswith("_split_k") and new is False:
        return {key.removesuffix("_split_k"): False, key: False}
    return {key: new}


@pytest.mark.parametrize("key", SETTING_KEYS)
def test_each_key_round_trips(key: str) -> None:
    before = read_settings()
    if key not in before:
        pytest.skip(f"this PyTorch ({torch.__version__}) has no {key}")
    changes = changes_for(key, before)
    skipped = apply_settings(changes)
    if skipped == [key] and key in NEEDS_CUDA and not torch.cuda.is_available():
        pytest.skip(f"{key} cannot change on a CPU-only build")
    assert skipped == []
    after = read_settings()
    assert {k: after[k] for k in changes} == changes
    assert after[key] != before[key]
    assert apply_settings(before) == []
    assert read_settings() == before


def test_read_change_apply_restores_exactly() -> None:
    before = read_settings()
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.set_float32_matmul_precision("medium")
    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.allow_tf32 = False
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.backends.cuda.enable_flash_sdp(False)
    torch.backends.mha.set_fastpath_enabled(False)
    torch.set_default_dtype(torch.float64)
    changed = read_settings()
    assert {key for key in before if changed.get(key) != before[key]} >= {
        "cuda.matmul.allow_tf32", "float32_matmul_precision", "cudnn.benchmark",
        "cudnn.allow_tf32", "deterministic_algorithms", "deterministic_algorithms_warn_only",
        "cuda.flash_sdp", "mha.fastpath", "default_dtype"}

    assert apply_settings(before) == []
    assert read_settings() == before
    # and seen through PyTorch's own getters
    assert torch.backends.cuda.matmul.allow_tf32 == before["cuda.matmul.allow_tf32"]
    assert torch.get_float32_matmul_precision() == before["float32_matmul_precision"]
    assert torch.backends.cudnn.benchmark == before["cudnn.benchmark"]
    assert torch.are_deterministic_algorithms_enabled() == before["deterministic_algorithms"]
    assert torch.backends.cuda.flash_sdp_enabled() == before["cuda.flash_sdp"]
    assert str(torch.get_default_dtype()) == f"torch.{before['default_dtype']}"


def read_after_changing_the_generic_precision() -> dict[str, Any]:
    """The settings seen once ``torch.backends.fp32_precision`` changes: shows which
    ``fp32_precision`` nodes inherit (follow their parent) and which were set themselves."""
    saved = torch.backends.fp32_precision
    torch.backends.fp32_precision = "ieee" if saved != "ieee" else "tf32"
    try:
        return read_settings()
    finally:
        torch.backends.fp32_precision = saved


def test_new_precision_api_alone_round_trips() -> None:
    """``torch.backends.fp32_precision = "tf32"`` alone (what some libraries do) leaves the
    legacy getters unreadable; the fp32_precision nodes carry the state instead."""
    before = read_settings()
    if "fp32_precision" not in before:
        pytest.skip(f"this PyTorch ({torch.__version__}) has no fp32_precision API")
    torch.backends.fp32_precision = "tf32"
    torch.backends.mkldnn.matmul.fp32_precision = "ieee"  # a child unlike its parent
    mixed = read_settings()
    assert "cuda.matmul.allow_tf32" not in mixed
    assert mixed["cuda.matmul.fp32_precision"] == "tf32"
    assert (mixed["mkldnn.fp32_precision"], mixed["mkldnn.matmul.fp32_precision"]) == (
        "tf32", "ieee")
    mixed_then_changed = read_after_changing_the_generic_precision()

    assert apply_settings(before) == []
    assert read_settings() == before
    assert apply_settings(mixed) == []
    assert read_settings() == mixed
    # inheriting nodes still inherit: parents are set first, children only where they differ
    assert read_after_changing_the_generic_precision() == mixed_then_changed


def test_describe_lists_only_non_defaults() -> None:
    assert describe_settings(read_settings()) == ""
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.benchmark = True
    assert describe_settings(read_settings()) == "TF32 matmul on, cudnn.benchmark on"
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.enable_flash_sdp(False)
    torch.set_default_dtype(torch.float64)
    assert describe_settings(read_settings()) == (
        "TF32 cuDNN off, cudnn.benchmark on, flash SDPA off, default dtype float64")


def test_unknown_keys_are_skipped() -> None:
    before = read_settings()
    assert apply_settings({"no.such.switch": True, "cudnn.benchmark": True}) == [
        "no.such.switch"]
    assert torch.backends.cudnn.benchmark is True
    assert describe_settings({"no.such.switch": True}) == ""
    assert read_settings() == {**before, "cudnn.benchmark": True}


def test_arguments_are_checked() -> None:
    with pytest.raises(TypeError, match="settings must be a mapping"):
        apply_settings([("cudnn.benchmark", True)])  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="settings must be a mapping"):
        describe_settings(None)  # type: ignore[arg-type]


CHILD = """
import json, sys
import torch
from torch_nsight.capture.calls.settings import apply_settings, describe_settings, read_settings
parent = json.loads(sys.stdin.read())
fresh = read_settings()
skipped = apply_settings(parent)
print(json.dumps({"fresh": fresh, "fresh_description": describe_settings(fresh),
                  "skipped": skipped, "after": read_settings(),
                  "allow_tf32": torch.backends.cuda.matmul.allow_tf32}))
"""


@pytest.mark.slow
def test_a_fresh_process_gets_the_parents_tf32_setting() -> None:
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.benchmark = True
    parent = read_settings()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])])}
    done = subprocess.run([sys.executable, "-c", CHILD], input=json.dumps(parent),
                          capture_output=True, text=True, env=env, cwd=REPO, timeout=300,
                          check=False)
    assert done.returncode == 0, done.stderr
    child = json.loads(done.stdout)
    assert child["fresh"]["cuda.matmul.allow_tf32"] is False  # lost without apply_settings
    assert child["fresh_description"] == ""  # a fresh process has the defaults
    assert child["skipped"] == []
    assert child["after"] == parent
    assert child["allow_tf32"] is True
