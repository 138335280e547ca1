"""Codes, not sentences, between stages (docs/findings.md, STYLE.md): analysis decides on
codes and never reads back, nor writes, the words of a reason, a fix, an evidence or a next
step; render writes them.

Two ways to fail: the source (an AST scan of ``torch_nsight/analyze`` for a branch on one of
those texts: ``.str.startswith``/``.str.contains`` on their columns, ``"small grid (" in
reason``, a dict looked up by a fix's text; and for a column of words written:
``out["reason"] = ...``, ``.assign(next_step=...)``) and the behaviour (the tables analysis
returns hold codes and no words; reword render's sentences, or the kernel table's reasons, on
a recorded report: every code the analysis returns stays the same)."""

from __future__ import annotations

import ast
from pathlib import Path

import pandas as pd
import pytest

import torch_nsight
import torch_nsight.render.finding_words as finding_words
import torch_nsight.render.hotspot_words as hotspot_words
import torch_nsight.render.reason_words as reason_words
from tests.recorded import load_recorded
from torch_nsight.analyze import add_limiter, classify, findings, fold_findings, hotspots
from torch_nsight.analyze.findings.switch_fixes import switch_fix
from torch_nsight.vocabulary import FINDING_CODE_COLUMNS

PACKAGE = Path(__file__).resolve().parents[2] / "torch_nsight"
DATA = Path(__file__).resolve().parents[1] / "data"
#: The columns (and the names code gives them) that hold words.
WORDS = frozenset({"reason", "reasons", "fix", "fixes", "evidence", "next_step"})
#: Ways to branch on a text.
READS = frozenset({"startswith", "endswith", "contains", "match", "fullmatch", "find",
                   "rfind", "index", "count", "extract", "search"})


def _words_in(node: ast.AST) -> bool:
    """Whether ``node`` is a text of words: a name, attribute, ``["fix"]`` or
    ``.get("fix")`` of one of :data:`WORDS`, or ``str()`` of one."""
    if isinstance(node, ast.Name):
        return node.id in WORDS
    if isinstance(node, ast.Attribute):
        return node.attr in WORDS or (node.attr == "str" and _words_in(node.value))
    if isinstance(node, ast.Subscript):
        key = node.slice
        if isinstance(key, ast.Constant) and key.value in WORDS:
            return True
        return _words_in(node.value)
    if isinstance(node, ast.Call):
        func = node.func
        if isinstance(func, ast.Name) and func.id == "str" and node.args:
            return _words_in(node.args[0])
        if isinstance(func, ast.Attribute) and func.attr == "get" and node.args:
            first = node.args[0]
            return isinstance(first, ast.Constant) and first.value in WORDS
    return False


def _is_text(node: ast.AST) -> bool:
    return isinstance(node, ast.JoinedStr) or (isinstance(node, ast.Constant)
                                               and isinstance(node.value, str))


def sentence_reads(tree: ast.AST) -> list[tuple[int, str]]:
    """Where a parsed module branches on words: (line, what)."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr in READS and _words_in(node.func.value):
            found.append((node.lineno, f".{node.func.attr}() on words"))
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            if any(_words_in(s) for s in sides) and any(_is_text(s) for s in sides):
                found.append((node.lineno, "words compared with a text"))
            # (a bare ``reason`` is a stall reason's name in stalls.py: a code)
            bare = isinstance(node.left, ast.Name) and node.left.id in ("reason", "reasons")
            if any(isinstance(op, (ast.In, ast.NotIn)) for op in node.ops) \
                    and _words_in(node.left) and not bare:
                found.append((node.lineno, "words looked up in a collection"))
        if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load) \
                and not isinstance(node.slice, ast.Constant) and _words_in(node.slice):
            found.append((node.lineno, "a table keyed by words"))
    return found


def sentence_writes(tree: ast.AST) -> list[tuple[int, str]]:
    """Where a parsed module writes a column of words: (line, what)."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] \
            if isinstance(node, (ast.AugAssign, ast.AnnAssign)) else []
        for target in targets:
            if isinstance(target, ast.Subscript) and isinstance(target.slice, ast.Constant) \
                    and target.slice.value in WORDS:
                found.append((node.lineno, f"column {target.slice.value!r} written"))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr in ("assign", "insert"):
            named = [k.arg for k in node.keywords if k.arg in WORDS]
            named += [a.value for a in node.args if isinstance(a, ast.Constant)
                      and a.value in WORDS]
            found += [(node.lineno, f"column {name!r} written") for name in named]
    return found


def test_the_scan_sees_the_writes_it_forbids() -> None:
    caught = sentence_writes(ast.parse(
        'out["reason"] = pd.Series(reason, index=out.index)\n'
        'table["next_step"] = [next_step(b) for b in table["bound"]]\n'
        'frame = frame.assign(reason=words)\n'
        'frame.insert(3, "next_step", words)\n'))
    assert [line for line, _ in caught] == [1, 2, 3, 4]
    assert sentence_writes(ast.parse('out["reason_code"] = codes\nx = row["reason"]\n')) == []


def test_analysis_writes_no_words() -> None:
    """No column of words (a kernel's ``reason``, a hotspot's ``next_step``, a finding's
    ``evidence`` or ``fix``) is made in analyze: render makes them from the codes."""
    found = {f"{path.relative_to(PACKAGE)}:{line}": what
             for path in sorted((PACKAGE / "analyze").rglob("*.py"))
             for line, what in sentence_writes(ast.parse(path.read_text(), str(path)))}
    assert found == {}


def test_the_scan_sees_the_reads_it_forbids() -> None:
    caught = sentence_reads(ast.parse(
        'small = work["reason"].str.startswith("small grid")\n'
        'if "small grid (" in str(reasons[at]): pass\n'
        'make = FUSED_OP_SWITCHES[fix]\n'
        'key = FIX[row.get("fix")]\n'
        'ok = finding.get("fix") in SWITCHES\n'
        'same = row["evidence"] == f"{x} blocks"\n'))
    assert [line for line, _ in caught] == [1, 2, 3, 4, 5, 6]
    assert sentence_reads(ast.parse('out["reason"] = words\nx = row["fix_code"] in FIXES\n')) \
        == []


def test_analysis_never_branches_on_words() -> None:
    found = {f"{path.relative_to(PACKAGE)}:{line}": what
             for path in sorted((PACKAGE / "analyze").rglob("*.py"))
             for line, what in sentence_reads(ast.parse(path.read_text(), str(path)))}
    assert found == {}


@pytest.fixture(scope="module")
def conv() -> torch_nsight.Profile:
    return load_recorded(DATA / "findings_rules")


def _codes(profile: torch_nsight.Profile, kernels: pd.DataFrame | None = None) -> pd.DataFrame:
    kernels = profile.kernels if kernels is None else kernels
    coded = fold_findings(findings(kernels, profile.calls, profile.meta.settings), kernels)
    return coded.drop(columns=["facts"])


def test_rewording_render_changes_no_code(conv: torch_nsight.Profile,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    before = _codes(conv)
    worded = conv.finding_table()
    for code in list(finding_words.FIXES):
        monkeypatch.setitem(finding_words.FIXES, code, lambda row, params: "reworded")
    for code in list(finding_words.EVIDENCE):
        monkeypatch.setitem(finding_words.EVIDENCE, code, lambda row, facts: "reworded")
    pd.testing.assert_frame_equal(_codes(conv), before)
    again = finding_words.word_findings(fold_findings(
        findings(conv.kernels, conv.calls, conv.meta.settings), conv.kernels))
    assert set(again["fix"]) == {"reworded"}  # the words did change
    for gain in ("est_gain_ns", "gain_bound_ns"):
        assert again[gain].equals(worded[gain]), gain
    assert [switch_fix(r) for _, r in again.iterrows()] == [
        switch_fix(r) for _, r in worded.iterrows()]


def test_rewording_the_reasons_changes_no_code(conv: torch_nsight.Profile) -> None:
    """The kernel table's reasons (render's words) reworded: the findings' codes and the
    hotspots' verdicts, the facts of their reasons and their next steps stay what they
    were."""
    reworded = conv.kernels.assign(reason="reworded")
    pd.testing.assert_frame_equal(_codes(conv, reworded), _codes(conv))
    columns = ["module", "kernel", "bound", "reason_facts", "next_step_code", "headroom_ns"]
    pd.testing.assert_frame_equal(hotspots(reworded, n=50)[columns],
                                  hotspots(conv.kernels, n=50)[columns])
    assert set(FINDING_CODE_COLUMNS) <= set(conv.finding_table().columns)


@pytest.mark.parametrize("level", ["kernel", "module"])
def test_hotspots_are_codes_and_render_words_them(conv: torch_nsight.Profile, level: str,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """analysis' hotspot tables and kernel table hold the codes of ``reason`` and
    ``next_step`` and no words; the Profile's hold render's words, and rewording render
    changes those words alone."""
    coded = hotspots(conv.kernels, n=50, level=level)  # type: ignore[arg-type]
    assert not {"reason", "next_step"} & set(coded.columns)
    assert coded["next_step_code"].map(lambda c: c in hotspot_words.NEXT_STEP).all()
    again = add_limiter(classify(conv.kernels.drop(columns=["reason", "reason_code",
                                                           "limiter"])))  # the words' steps
    assert "reason" not in again and again["reason_code"].notna().all()
    worded = conv.hotspots(n=50, level=level)  # type: ignore[arg-type]
    assert worded["next_step"].map(lambda s: isinstance(s, str) and len(s) > 0).all()
    if level == "kernel":
        assert worded["reason"].map(lambda s: isinstance(s, str) and len(s) > 0).all()
        monkeypatch.setattr(reason_words, "_roof_fact", lambda *args: "reworded roof")
    for code in list(hotspot_words.NEXT_STEP):
        monkeypatch.setitem(hotspot_words.NEXT_STEP, code, "reworded")
    again = hotspot_words.word_hotspots(hotspots(conv.kernels, n=50, level=level))
    assert set(again["next_step"]) == {"reworded"}
    if level == "kernel":
        assert again["reason"].str.contains("reworded roof").any()
    pd.testing.assert_frame_equal(hotspots(conv.kernels, n=50, level=level), coded)
