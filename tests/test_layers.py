"""The import rules, read from the source: one-way layers, no cycle, the child kept apart.

The order (docs/architecture.md): the stage-neutral modules (errors, naming, metrics,
formats, vocabulary, record, the calls file, units, checks, files, shape FLOPs), then capture, report, analyze, the Profile
record, loading, render, collect (whose parent returns a loaded Profile) and the CLI on top.
Capture is a side branch: the stages that read and show profiles never import it (torch).

Every import counts, also one inside a function: a lazy import still ties two modules.
``from a import b`` stands for module ``a.b`` where that is a module, for ``a`` otherwise.
Only the imports that run count: the ones under ``if TYPE_CHECKING:`` are for mypy alone.
Inside capture, the rooms (one folder per job, every module in exactly one) import each
other one way: a room imports only the rooms before it in :data:`CAPTURE_ROOMS`.
On top of the layers, the module graph has no cycle, no module inside the package imports
the package root (whose names load lazily from their modules), and the child process
(``collect/child``) reaches no parent-process code, not even through a module between.
"""

from __future__ import annotations

import ast
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

PACKAGE = Path(__file__).resolve().parents[1] / "torch_nsight"
NEUTRAL = ("version", "errors", "naming", "metrics", "formats", "vocabulary", "record",
           "calls_file", "units", "status", "verify_exchange", "checks", "files", "environment",
           "shape_flops")
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
#: The child process (under ``ncu``) and the parent-process code it must never reach.
CHILD = "collect.child"
#: Capture's rooms in their one-way order (docs/architecture.md): each imports only the
#: rooms before it. The ranges are the base; the calls table, compiled graphs, a sweep's
#: replicas, the script's steps and --verify's fixes build on them; the front door
#: (``instrument()``) puts them all to work.
CAPTURE_ROOMS = ("ranges", "calls", "compiled", "replicas", "script", "fixes", "front")
PARENT_ONLY = ("collect.parent", "cli")
T = TypeVar("T")


@dataclass(frozen=True)
class Import:
    """One import statement's target: ``name`` as written, ``target`` the module it runs."""

    line: int
    name: str
    target: str
    lazy: bool = False  # inside a function: runs when it is called, not on import


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


def _modules(package: Path) -> dict[str, Path]:
    return {_module_name(path, package): path for path in sorted(package.rglob("*.py"))}


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _statements(tree: ast.AST, lazy: bool = False
                ) -> Iterator[tuple[ast.Import | ast.ImportFrom, bool]]:
    """(statement, lazy) for every import that runs, functions included; not those for
    mypy alone."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node, lazy
        if isinstance(node, ast.If) and _is_type_checking(node):
            for child in node.orelse:
                yield from _statements(ast.Module(body=[child], type_ignores=[]), lazy)
            continue
        yield from _statements(node, lazy or isinstance(
            node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)))


def _imports(path: Path, module: str, modules: set[str]) -> list[Import]:
    """The imports of one file, relative ones resolved, ``from a import b`` to ``a.b``."""
    found = []
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node, lazy in _statements(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [Import(node.lineno, a.name, a.name, lazy) for a in node.names]
            continue
        base = node.module or ""
        if node.level:
            anchor = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
            base = f"{anchor}.{base}" if base else anchor
        for alias in node.names:
            full = f"{base}.{alias.name}"
            found.append(Import(node.lineno, base, full if full in modules else base, lazy))
    return found


def _graph(package: Path) -> dict[str, list[Import]]:
    """Each module of the package and its imports of modules inside the package."""
    modules = _modules(package)
    root = package.name
    return {module: [i for i in _imports(path, module, set(modules))
                     if i.target == root or i.target.startswith(f"{root}.")]
            for module, path in modules.items()}


def _violations(package: Path = PACKAGE) -> list[str]:
    out = []
    for module, path in _modules(package).items():
        stage = _stage(module)
        assert stage in ORDER, f"{module}: stage {stage!r} is not in the layer order"
        for found in _imports(path, module, set()):
            name = found.name
            where = f"{path.relative_to(package.parent)}:{found.line}"
            if name.split(".")[0] in FORBIDDEN.get(stage, ()):
                out.append(f"{where}: the {stage} stage imports {name}")
            if not name.startswith(f"{package.name}."):
                continue
            target = _stage(found.target)
            if ORDER.index(target) > ORDER.index(stage):
                out.append(f"{where}: {stage} imports {found.target} of the {target} stage "
                           f"above it")
            elif target == "capture" and stage in WITHOUT_CAPTURE:
                out.append(f"{where}: {stage} imports {found.target} of the capture stage "
                           f"(torch)")
    return out


def _components(edges: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components of the graph, each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for after in sorted(edges.get(node, ())):
            if after not in index:
                visit(after)
                low[node] = min(low[node], low[after])
            elif after in stack:
                low[node] = min(low[node], index[after])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                component.append(top)
                if top == node:
                    break
            found.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return found


def _search(start: T, is_goal: Callable[[T], bool], neighbours: Callable[[T], list[T]]
            ) -> list[T]:
    """The shortest chain from ``start`` to a goal (breadth first), or []."""
    before: dict[T, T | None] = {start: None}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        for after in neighbours(node):
            if is_goal(after):
                chain = [after, node]
                while (previous := before[chain[-1]]) is not None:
                    chain.append(previous)
                return chain[::-1]
            if after not in before:
                before[after] = node
                queue.append(after)
    return []


def _cycles(package: Path = PACKAGE) -> list[str]:
    """One line per import cycle (lazy imports included), naming its modules."""
    edges = {module: {i.target for i in imports} for module, imports in _graph(package).items()}
    out = []
    for component in _components(edges):
        if len(component) == 1 and component[0] not in edges[component[0]]:
            continue
        chain = _search(component[0], component[0].__eq__,
                        lambda node, within=set(component): sorted(edges[node] & within))
        out.append(f"import cycle among {', '.join(component)}: {' -> '.join(chain)}")
    return out


def _room(module: str) -> str | None:
    """The capture room of a dotted module name, None outside the rooms."""
    parts = module.split(".")
    return parts[2] if len(parts) > 2 and parts[1] == "capture" else None


def _room_violations(package: Path = PACKAGE) -> list[str]:
    """Imports from one capture room into a room after it, or into the capture package
    itself (which imports every room)."""
    out = []
    capture = f"{package.name}.capture"
    for module, imports in _graph(package).items():
        room = _room(module)
        if room is None:
            continue
        for found in imports:
            target = _room(found.target)
            if found.target == capture:
                out.append(f"{module}:{found.line} imports the package {capture}, which "
                           f"imports every room: import the module that defines the name")
            elif target is not None and target != room and (
                    room not in CAPTURE_ROOMS or target not in CAPTURE_ROOMS
                    or CAPTURE_ROOMS.index(target) > CAPTURE_ROOMS.index(room)):
                out.append(f"{module}:{found.line} in capture/{room}/ imports {found.target} "
                           f"of capture/{target}/, which comes after it")
    return out


def _outside_the_rooms(package: Path = PACKAGE) -> list[str]:
    """Capture modules not in exactly one room: a file directly in capture/ (but its
    ``__init__.py``), in a folder that is no room, or nested deeper; rooms not there."""
    capture = package / "capture"
    out = [f"{path.relative_to(package.parent)}: not in one room of capture "
           f"({', '.join(CAPTURE_ROOMS)})" for path in sorted(capture.rglob("*.py"))
           if (parts := path.relative_to(capture).parts) != ("__init__.py",)
           and (len(parts) != 2 or parts[0] not in CAPTURE_ROOMS)]
    return out + [f"capture/{room}/ is no package (no __init__.py)" for room in CAPTURE_ROOMS
                  if not (capture / room / "__init__.py").is_file()]


def _root_imports(package: Path = PACKAGE) -> list[str]:
    """Modules inside the package that import the package root instead of a submodule."""
    root = package.name
    return [f"{module}:{i.line} imports the package root {root} (`{i.name}`): import the "
            f"submodule that defines the name" for module, imports in _graph(package).items()
            if module != root for i in imports if i.target == root]


def _child_reaches_parent(package: Path = PACKAGE) -> list[str]:
    """Child-process modules that import parent-process code, directly or through others.

    Importing a module runs its packages' ``__init__`` first, their module level only (a
    package's lazy ``__getattr__`` runs when its name is asked for, an import naming it).
    """
    graph = _graph(package)
    root = package.name
    parent = {m for m in graph for area in PARENT_ONLY
              if m == f"{root}.{area}" or m.startswith(f"{root}.{area}.")}

    def neighbours(state: tuple[str, bool]) -> list[tuple[str, bool]]:
        module, whole = state
        found = {(i.target, True) for i in graph[module] if whole or not i.lazy}
        above = module.rpartition(".")[0]
        while above and above not in graph:  # a folder without __init__.py runs nothing
            above = above.rpartition(".")[0]
        return sorted(found | ({(above, False)} if above else set()))

    out = []
    for module in sorted(graph):
        if module == f"{root}.{CHILD}" or module.startswith(f"{root}.{CHILD}."):
            chain = _search((module, True), lambda state: state[0] in parent, neighbours)
            if chain:
                steps = [m if whole else f"{m} (its package)" for m, whole in chain]
                out.append(f"the child's {module} reaches parent code: {' -> '.join(steps)}")
    return out


def test_no_stage_imports_a_stage_above_it() -> None:
    assert _violations() == []


def test_no_import_cycle() -> None:
    assert _cycles() == []


def test_capture_rooms_import_only_the_rooms_before_them() -> None:
    assert _room_violations() == []


def test_every_capture_module_lives_in_one_room() -> None:
    assert _outside_the_rooms() == []


def test_nothing_inside_imports_the_package_root() -> None:
    assert _root_imports() == []


def test_the_child_imports_no_parent_code() -> None:
    assert _child_reaches_parent() == []


def test_the_rule_catches_an_upward_and_a_forbidden_import(tmp_path: Path) -> None:
    package = tmp_path / "torch_nsight"
    (package / "analyze").mkdir(parents=True)
    (package / "analyze" / "late.py").write_text(
        "import pandas as pd\n\n\ndef f():\n    import torch\n"
        "    from torch_nsight.render.table_output import render_table\n"
        "    from torch_nsight.vocabulary import LABELS\n"
        "    from torch_nsight.capture.calls.settings import read_settings\n")
    (package / "units.py").write_text("import pandas\n")
    assert _violations(package) == [
        "torch_nsight/analyze/late.py:5: the analyze stage imports torch",
        "torch_nsight/analyze/late.py:6: analyze imports torch_nsight.render.table_output of the "
        "render stage above it",
        "torch_nsight/analyze/late.py:8: analyze imports torch_nsight.capture.calls.settings of the "
        "capture stage (torch)",
        "torch_nsight/units.py:1: the neutral stage imports pandas",
    ]


def _plant(package: Path, files: dict[str, str]) -> Path:
    for name, text in {"__init__.py": "", **files}.items():
        (package / name).parent.mkdir(parents=True, exist_ok=True)
        (package / name).write_text(text)
    return package


def test_the_check_catches_a_planted_cycle(tmp_path: Path) -> None:
    package = _plant(tmp_path / "pkg", {
        "a.py": "def f():\n    from pkg import b\n",  # lazy, and through the parent
        "b.py": "def g():\n    from . import a\n",  # lazy and relative
        "c.py": "from typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n    import pkg.d\n",
        "d.py": "import pkg.c\n",  # c imports d for mypy alone: no cycle
        "e.py": "import pkg.e\n"})
    assert _cycles(package) == ["import cycle among pkg.a, pkg.b: pkg.a -> pkg.b -> pkg.a",
                                "import cycle among pkg.e: pkg.e -> pkg.e"]


def test_the_check_catches_the_root_and_a_child_reaching_the_parent(tmp_path: Path) -> None:
    package = _plant(tmp_path / "pkg", {
        "names.py": "x = 1\n",
        "words.py": "from pkg import names\n",  # a submodule: not the root
        "collect/child/work.py": "def run():\n    import pkg\n    from ..between import x\n",
        "collect/child/__init__.py": "",
        "collect/child/other.py": "import os\n",
        "collect/between.py": "from pkg.collect.parent.go import x\n",
        "collect/parent/go.py": "x = 1\n"})
    assert _root_imports(package) == [
        "pkg.collect.child.work:2 imports the package root pkg (`pkg`): import the submodule "
        "that defines the name"]
    assert _child_reaches_parent(package) == [
        "the child's pkg.collect.child.work reaches parent code: pkg.collect.child.work -> "
        "pkg.collect.between -> pkg.collect.parent.go"]
    # a package above the child that imports parent code when it is imported: every child
    # module runs it; a lazy __getattr__ there runs only when its name is asked for
    (package / "collect" / "__init__.py").write_text(
        "from pkg.collect.parent.go import x\n\n\ndef __getattr__(name):\n"
        "    from pkg.collect.between import x\n")
    (package / "collect" / "between.py").write_text("x = 1\n")
    assert _child_reaches_parent(package)[1] == (
        "the child's pkg.collect.child.other reaches parent code: pkg.collect.child.other -> "
        "pkg.collect.child (its package) -> pkg.collect (its package) -> pkg.collect.parent.go")
    (package / "collect" / "__init__.py").write_text(
        "def __getattr__(name):\n    from pkg.collect.parent.go import x\n")
    assert _child_reaches_parent(package) == []


def test_the_room_checks_catch_an_import_after_and_a_module_outside(tmp_path: Path) -> None:
    package = _plant(tmp_path / "pkg", {
        "capture/__init__.py": "from pkg.capture.front.door import x\n",
        "capture/ranges/__init__.py": "",
        "capture/ranges/stack.py": "def f():\n    from pkg.capture.calls.table import y\n",
        "capture/ranges/base.py": "from pkg.capture import x\n",
        "capture/calls/__init__.py": "",
        "capture/calls/table.py": "from pkg.capture.ranges.stack import f\ny = 1\n",
        "capture/front/door.py": "from pkg.capture.calls.table import y\nx = 1\n",
        "capture/loose.py": "",
        "capture/calls/deep/inner.py": "",
        "capture/extra/thing.py": "from pkg.capture.front.door import x\n",
        **{f"capture/{room}/__init__.py": "" for room in ("compiled", "replicas", "script",
                                                          "front")}})
    assert _room_violations(package) == [
        "pkg.capture.extra.thing:1 in capture/extra/ imports pkg.capture.front.door of "
        "capture/front/, which comes after it",
        "pkg.capture.ranges.base:1 imports the package pkg.capture, which imports every room: "
        "import the module that defines the name",
        "pkg.capture.ranges.stack:2 in capture/ranges/ imports pkg.capture.calls.table of "
        "capture/calls/, which comes after it"]
    rooms = ", ".join(CAPTURE_ROOMS)
    assert _outside_the_rooms(package) == [
        f"pkg/capture/calls/deep/inner.py: not in one room of capture ({rooms})",
        f"pkg/capture/extra/thing.py: not in one room of capture ({rooms})",
        f"pkg/capture/loose.py: not in one room of capture ({rooms})",
        "capture/fixes/ is no package (no __init__.py)"]
