"""Sizes, read from the source: every file of the package readable in one sitting, every
function short enough to read as the list of its phases (issue 35).

A function's length runs from its ``def`` line to its last line, docstring included
(``end_lineno - lineno + 1``; decorators above the ``def`` do not count); methods and nested
functions count on their own. :data:`ALLOWED` names the functions still over the limit: it
only shrinks, and an entry whose function was split must leave it.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "torch_nsight"
MAX_FILE_LINES = 450
MAX_FUNCTION_LINES = 80
#: ``path::function`` (path relative to the repository) allowed over MAX_FUNCTION_LINES
#: until they are split; empty it as they are.
ALLOWED: frozenset[str] = frozenset()


def _functions(tree: ast.AST) -> Iterator[ast.FunctionDef | ast.AsyncFunctionDef]:
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield node


def _oversized(package: Path = PACKAGE) -> tuple[list[str], list[str]]:
    """(files over MAX_FILE_LINES, functions over MAX_FUNCTION_LINES), one line each, the
    functions as ``path::name (N lines)``."""
    files, functions = [], []
    for path in sorted(package.rglob("*.py")):
        text = path.read_text()
        where = path.relative_to(package.parent).as_posix()
        if (count := len(text.splitlines())) > MAX_FILE_LINES:
            files.append(f"{where} ({count} lines)")
        for node in _functions(ast.parse(text, str(path))):
            length = (node.end_lineno or node.lineno) - node.lineno + 1
            if length > MAX_FUNCTION_LINES:
                functions.append(f"{where}::{node.name} ({length} lines)")
    return files, functions


def _name(entry: str) -> str:
    return entry.rpartition(" (")[0]


def test_no_file_is_too_long() -> None:
    files, _ = _oversized()
    assert files == [], f"split these files (at most {MAX_FILE_LINES} lines each)"


def test_no_function_is_too_long() -> None:
    _, functions = _oversized()
    over = [f for f in functions if _name(f) not in ALLOWED]
    assert over == [], f"split these functions (at most {MAX_FUNCTION_LINES} lines each)"


def test_the_allow_list_holds_only_functions_still_too_long() -> None:
    _, functions = _oversized()
    split = sorted(ALLOWED - {_name(f) for f in functions})
    assert split == [], "these are short now: remove them from ALLOWED"


def test_the_check_counts_docstrings_methods_and_files(tmp_path: Path) -> None:
    package = tmp_path / "torch_nsight"
    (package / "stage").mkdir(parents=True)
    docstring = '    """' + "\n" * MAX_FUNCTION_LINES + '    """\n'
    (package / "stage" / "long.py").write_text(
        "def short():\n    pass\n\n\nclass Holder:\n    def method(self):\n" + "    " + docstring
        + "        pass\n")
    (package / "big.py").write_text("x = 1\n" * (MAX_FILE_LINES + 1))
    assert _oversized(package) == (
        [f"torch_nsight/big.py ({MAX_FILE_LINES + 1} lines)"],
        [f"torch_nsight/stage/long.py::method ({MAX_FUNCTION_LINES + 3} lines)"])
