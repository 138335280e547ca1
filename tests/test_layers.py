"""The one-way layer rule, read from the source: a stage imports only the stages below it.

The order (docs/architecture.md): the stage-neutral modules (errors, naming, metrics,
formats, vocabulary, record, the calls file, units, checks, files), then capture, report, analyze, the Profile
record, loading, render, collect (whose parent returns a loaded Profile) and the CLI on top.
Capture is a side branch: the stages that read and show profiles never import it (torch).
Every import counts, also one inside a function: a lazy import still ties two stages.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "torch_nsight"
NEUTRAL = ("__version__", "errors", "naming", "metrics", "formats", "vocabulary", "record",
           "calls_file", "units", "status", "checks", "files")
ORDER = ("neutral", "capture", "report", "analyze", "profile", "loading", "render", "collect",
         "demo", "cli", "top")
#: Third-party packages a stage must never import (capture runs in the user's process
#: beside torch; report, analyze and render run on a laptop without torch).
FORBIDDEN = {"neutral": {"torch", "pandas"}, "capture": {"pandas"}, "report": {"torch"},
             "analyze": {"torch"}, "profile": {"torch"}, "loading": {"torch"},
             "render": {"torch"}}
#: Capture is a side branch: it runs in the user's process, and importing it imports torch,
#: so the stages that read and show profiles never import it.
WITHOUT_CAPTURE = ("report", "analyze", "profile", "loading", "render")


def _stage(module: str) -> str:
    """The stage of a dotted module name inside the package."""
    parts = module.split(".")
    if len(parts) == 1:
        return "top"  # torch_nsight/__init__.py, the public front door
    name = parts[1]
    if name in NEUTRAL:
        return "neutral"
    if name in ("__main__",):
        return "cli"
    return name


def _module_name(path: Path, package: Path) -> str:
    parts = path.relative_to(package.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> list[tuple[int, str]]:
    """(line, dotted name) of every absolute import in the file, functions included."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module == "torch_nsight":
                found += [(node.lineno, f"torch_nsight.{a.name}") for a in node.names]
            else:
                found.append((node.lineno, node.module))
        elif isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
    return found


def _violations(package: Path = PACKAGE) -> list[str]:
    out = []
    for path in sorted(package.rglob("*.py")):
        module = _module_name(path, package)
        stage = _stage(module)
        assert stage in ORDER, f"{module}: stage {stage!r} is not in the layer order"
        for line, name in _imports(path):
            where = f"{path.relative_to(package.parent)}:{line}"
            if name.split(".")[0] in FORBIDDEN.get(stage, ()):
                out.append(f"{where}: the {stage} stage imports {name}")
            if not name.startswith("torch_nsight."):
                continue
            target = _stage(name)
            if ORDER.index(target) > ORDER.index(stage):
                out.append(f"{where}: {stage} imports {name} of the {target} stage above it")
            elif target == "capture" and stage in WITHOUT_CAPTURE:
                out.append(f"{where}: {stage} imports {name} of the capture stage (torch)")
    return out


def test_no_stage_imports_a_stage_above_it() -> None:
    assert _violations() == []


def test_the_rule_catches_an_upward_and_a_forbidden_import(tmp_path: Path) -> None:
    package = tmp_path / "torch_nsight"
    (package / "analyze").mkdir(parents=True)
    (package / "analyze" / "late.py").write_text(
        "import pandas as pd\n\n\ndef f():\n    import torch\n"
        "    from torch_nsight.render.table import render_table\n"
        "    from torch_nsight.vocabulary import LABELS\n"
        "    from torch_nsight.capture.settings import read_settings\n")
    (package / "units.py").write_text("import pandas\n")
    assert _violations(package) == [
        "torch_nsight/analyze/late.py:5: the analyze stage imports torch",
        "torch_nsight/analyze/late.py:6: analyze imports torch_nsight.render.table of the "
        "render stage above it",
        "torch_nsight/analyze/late.py:8: analyze imports torch_nsight.capture.settings of the "
        "capture stage (torch)",
        "torch_nsight/units.py:1: the neutral stage imports pandas",
    ]
