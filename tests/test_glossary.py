"""docs/glossary.md: one word per concept. The spellings it names as gone are gone (from
the command line's options and the Python signatures), and no deprecation shim is left in
the package: before 1.0 a renamed spelling goes rather than stay beside its new name."""

from __future__ import annotations

import argparse
import inspect
import re
from pathlib import Path
from typing import Any

import pytest

from torch_nsight.cli.main import build_parser

ROOT = Path(__file__).resolve().parent.parent
GLOSSARY = ROOT / "docs" / "glossary.md"


def _gone() -> list[str]:
    """The backticked spellings in the glossary's rows that say something is gone."""
    found: list[str] = []
    for line in GLOSSARY.read_text(encoding="utf-8").splitlines():
        cells = line.split(" | ")
        if line.startswith("|") and "gone" in cells[-1]:
            found += re.findall(r"`([^`]+)`", cells[-1])
    return found


def _commands() -> dict[str, argparse.ArgumentParser]:
    return next(a for a in build_parser()._actions
                if isinstance(a, argparse._SubParsersAction)).choices


def _function(name: str) -> Any:
    import torch_nsight
    from torch_nsight.profile import Profile
    from torch_nsight.render.table_output import render_table

    return {"sweep": torch_nsight.sweep, "timeline": torch_nsight.timeline,
            "Profile.hotspots": Profile.hotspots, "render_table": render_table}[name]


def test_the_glossary_names_what_went() -> None:
    gone = _gone()
    assert {"sweep(repeats=)", "--repeats", "timeline --steps N", "--by time",
            "Profile.hotspots(by=)"} <= set(gone), gone


@pytest.mark.parametrize("spelling", [s for s in _gone() if "--" in s])
def test_an_option_the_glossary_says_went_is_gone(spelling: str) -> None:
    commands = _commands()
    words = spelling.split()
    named = [words.pop(0)] if words[0] in commands else list(commands)
    option = words[0]
    value = words[1] if len(words) > 1 and not words[1].isupper() else None
    for command in named:
        actions = commands[command]._option_string_actions
        if option in actions:
            assert value is not None, (command, option)
            assert value not in (actions[option].choices or ()), (command, spelling)


@pytest.mark.parametrize("spelling", [s for s in _gone() if re.fullmatch(r"[\w.]+\(\w+=\)", s)])
def test_a_keyword_the_glossary_says_went_is_gone(spelling: str) -> None:
    name, keyword = re.fullmatch(r"([\w.]+)\((\w+)=\)", spelling).groups()  # type: ignore[union-attr]
    assert keyword not in inspect.signature(_function(name)).parameters


def test_no_deprecation_shim_is_left() -> None:
    shims = [f"{path.relative_to(ROOT)}:{number}"
             for path in sorted((ROOT / "torch_nsight").rglob("*.py"))
             for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
             if "DeprecationWarning" in line and "filterwarnings" not in line
             and "category=DeprecationWarning" not in line]
    assert shims == []
