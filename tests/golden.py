"""Golden text: an output compared with the file that holds it as it was, and the switch that
rewrites the files (``TORCH_NSIGHT_REGEN_GOLDEN=1``). Used by the golden tests of the
renderers (tests/render/golden/) and of every recorded source (tests/data/golden/)."""

from __future__ import annotations

import contextlib
import difflib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

#: Set: every golden test writes its files instead of reading them (then read the diff).
REGENERATE = os.environ.get("TORCH_NSIGHT_REGEN_GOLDEN") == "1"
#: Lines of a difference shown; the rest is in ``git diff`` after regenerating.
SHOWN_LINES = 80


def diff_against_golden(name: str, text: str, golden: Path, *,
                        regenerate: bool = REGENERATE) -> str | None:
    """Compare ``text`` with the golden file ``golden/name``.

    Args:
        name: the file's path under ``golden``.
        text: the output as it is rendered now.
        golden: the folder of golden files.
        regenerate: write ``text`` to the file first (folders made as needed).

    Returns:
        None when the file holds ``text`` exactly; otherwise what differs: a unified diff of
        the file against ``text`` (its first :data:`SHOWN_LINES` lines), or that the file
        is missing.
    """
    path = golden / name
    if regenerate:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    if not path.is_file():
        return f"{path}: no golden file (TORCH_NSIGHT_REGEN_GOLDEN=1 writes it)"
    expected = path.read_text(encoding="utf-8")
    if expected == text:
        return None
    lines = list(difflib.unified_diff(expected.splitlines(keepends=True),
                                      text.splitlines(keepends=True), f"golden/{name}", "now",
                                      n=1))
    if not lines:  # the same lines, but not the same text: a line ending
        return f"{path}: differs from the output in its line endings or last newline"
    more = len(lines) - SHOWN_LINES
    return "".join(lines[:SHOWN_LINES]) + (f"... and {more} more lines\n" if more > 0 else "")


@contextlib.contextmanager
def findings_computed_once() -> Iterator[None]:
    """Within it, each profile's findings are computed once (the slowest step of rendering
    a recorded source, seconds each) and every later call gets a copy of that frame.
    Findings depend on the loaded profile alone, and every load of a source gives the same
    one, so the text rendered and measured is the same as without it.

    It stands in for :meth:`Profile.finding_table`, which the renderers and the command line
    call and :meth:`Profile.findings` calls in turn (in for ``findings`` alone, it was never
    reached by a command: each test computed its source's findings again)."""
    import pytest

    from torch_nsight.profile import Profile

    computed: dict[tuple[Any, ...], Any] = {}
    compute = Profile.finding_table

    def finding_table_once(self: Profile, fold: bool = True) -> Any:
        key = (tuple(str(source.path) for source in self.meta.sources), fold,
               len(self.kernels), float(self.kernels["duration_ns"].sum()))
        if key not in computed:
            computed[key] = compute(self, fold=fold)
        return computed[key].copy()

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Profile, "finding_table", finding_table_once)
        yield
