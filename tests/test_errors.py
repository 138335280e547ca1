"""Every exported error type is raised somewhere in the package and named by a test."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import torch_nsight
from torch_nsight import errors

ROOT = Path(__file__).resolve().parents[1]
EXPORTED = [name for name in errors.__all__ if name != "TorchNsightError"]


def _text(folder: Path) -> str:
    return "\n".join(p.read_text(encoding="utf-8") for p in folder.rglob("*.py")
                     if p.resolve() != Path(__file__).resolve())


@pytest.mark.parametrize("name", EXPORTED)
def test_each_exported_error_is_raised_and_tested(name: str) -> None:
    made = re.search(rf"(raise {name}\b|= {name}\()", _text(ROOT / "torch_nsight"))
    assert made, f"{name} is never raised"
    assert re.search(rf"\b{name}\b", _text(ROOT / "tests")), f"no test names {name}"


@pytest.mark.parametrize("name", errors.__all__)
def test_each_error_is_public_and_a_torch_nsight_error(name: str) -> None:
    error = getattr(torch_nsight, name)
    assert issubclass(error, torch_nsight.TorchNsightError)
    assert error.__doc__
