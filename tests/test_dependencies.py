"""Every third-party module the package imports is a declared runtime dependency."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# import name -> distribution name, where they differ
DISTRIBUTIONS = {"ncu_report": "ncu-report"}


def imported_top_level_modules() -> set[str]:
    names: set[str] = set()
    for path in (ROOT / "torch_nsight").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module.split(".")[0])
    return {n for n in names if n not in sys.stdlib_module_names and n != "torch_nsight"}


def test_every_imported_module_is_declared() -> None:
    tomllib = pytest.importorskip("tomllib")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    declared = {dep.split(";")[0].split("[")[0].split("<")[0].split(">")[0].split("=")[0]
                .strip().lower() for dep in project["dependencies"]}
    used = {DISTRIBUTIONS.get(name, name).lower() for name in imported_top_level_modules()}
    assert used - declared == set(), f"imported but not declared: {sorted(used - declared)}"


def test_the_readme_names_every_declared_dependency() -> None:
    tomllib = pytest.importorskip("tomllib")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    declared = {dep.split(";")[0].split("[")[0].split("<")[0].split(">")[0].split("=")[0]
                .strip().lower() for dep in project["dependencies"]}
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    paragraph = " ".join(readme.split("Installing pulls ", 1)[1].split("\n\n", 1)[0].split())
    assert all(name in paragraph for name in declared), \
        f"README's dependency list lacks {sorted(n for n in declared if n not in paragraph)}"
