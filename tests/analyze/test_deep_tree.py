"""1,000 nested module ranges (issue 33): read, rolled up and printed as a tree, with no
path rebuilt per (row, ancestor). The trace is the recorded CUDA-graph trace
(tests/data/graph_captured_timeline) with its one measured step refilled: the events of its
module range ``0``, its ``cudaLaunchKernel`` and the kernel that launched, copied once per
level, each range holding the next."""

from __future__ import annotations

import contextlib
import gzip
import io
import json
from pathlib import Path
from typing import Any

import torch_nsight
from torch_nsight.cli.main import main
from torch_nsight.vocabulary import PATH_SEP, ancestors

TRACE = Path(__file__).resolve().parents[1] / "data" / "graph_captured_timeline" / \
    "trace.json.gz"
DEPTH = 1000


def deep_trace(depth: int) -> dict[str, Any]:
    """The recorded trace with ``depth`` nested module ranges in its measured step, one
    kernel launched inside each."""
    with gzip.open(TRACE, "rt", encoding="utf-8") as handle:
        document = json.load(handle)
    events = document["traceEvents"]
    label = next(e for e in events if str(e.get("name")).startswith("torch_nsight/sweep;"))
    module = next(e for e in events if e.get("name") == "torch_nsight/0")
    launch = next(e for e in events if e.get("name") == "cudaLaunchKernel")
    kernel = next(e for e in events if e.get("cat") == "kernel"
                  and e["args"]["correlation"] == launch["args"]["correlation"])
    start, step = label["ts"], 10.0
    kept = [e for e in events if e.get("ph") != "X"]
    kept.append({**label, "dur": step * (2 * depth + 4)})
    for level in range(depth):
        at = start + 1 + step * level
        correlation = 1_000_000 + level
        kept.append({**module, "name": f"torch_nsight/m{level}", "ts": at,
                     "dur": step * (2 * (depth - level) + 1)})
        kept.append({**launch, "ts": at + 2, "dur": 1.0,
                     "args": {**launch["args"], "correlation": correlation}})
        kept.append({**kernel, "ts": at + 4, "dur": 3.0,
                     "args": {**kernel["args"], "correlation": correlation}})
    document["traceEvents"] = kept
    return document


def test_a_thousand_nested_ranges_make_a_tree_of_a_thousand_levels(tmp_path: Path) -> None:
    path = tmp_path / "deep.json"
    path.write_text(json.dumps(deep_trace(DEPTH)))
    tree = torch_nsight.load(path).modules()
    assert len(tree) == DEPTH
    assert tree["depth"].tolist() == list(range(DEPTH))  # parents before children
    assert tree["kernels"].tolist() == list(range(DEPTH, 0, -1))  # inclusive counts
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["report", str(path), "--by", "module"]) == 0
    assert f"m{DEPTH - 1}" in out.getvalue()


def test_a_deep_row_shows_its_depth_in_place_of_its_indent(tmp_path: Path) -> None:
    """The printed tree is linear in the depth: past INDENT_LEVELS a row says how deep it
    is instead of drawing a ``· `` per level (1,000 levels: 2,000 characters a row)."""
    from torch_nsight.render.columns import INDENT_LEVELS

    path = tmp_path / "deep.json"
    path.write_text(json.dumps(deep_trace(DEPTH)))
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["report", str(path), "--by", "module"]) == 0
    lines = out.getvalue().splitlines()
    rows = [line for line in lines if " m" in line and "fwd" in line]
    assert len(rows) == DEPTH
    assert "· " * INDENT_LEVELS + "m16 " in rows[16]
    assert "· " * (INDENT_LEVELS - 4) + f"(depth {DEPTH - 1}) m{DEPTH - 1} " in rows[-1]
    assert max(len(line) for line in lines) < 200


def test_ancestor_chains_share_their_parents_strings() -> None:
    path = PATH_SEP.join(f"m{level}" for level in range(DEPTH))
    chain = ancestors(path)
    parent = ancestors(path.rsplit(PATH_SEP, 1)[0])
    assert len(chain) == DEPTH and chain[-1] == path
    assert all(mine is theirs for mine, theirs in zip(chain, parent, strict=False))
