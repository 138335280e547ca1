"""The csv and json writers' edge (issue 45): text cells escaped and kept from starting a
spreadsheet formula, numbers left as numbers; json with every control character as its
JSON escape, the same document to a reader."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from torch_nsight.render.readable_numbers import printable
from torch_nsight.render.table_output import csv_cell, frame_text, json_escaped


@pytest.mark.parametrize(("cell", "written"), [
    ('=HYPERLINK("x")', '\'=HYPERLINK("x")'), ("+1+1", "'+1+1"), ("-x", "'-x"),
    ("@SUM(A1)", "'@SUM(A1)"), ("\tx", "'\\tx"), ("\rx", "'\\rx"), ("-1.5", "-1.5"),
    ("+2", "+2"), ("1e-3", "1e-3"), ("h.0.attn", "h.0.attn"), ("a\x1bb\u202e", "a\\x1bb\\u202e"),
    (-1.5, -1.5), (None, None)])
def test_csv_cell(cell: object, written: object) -> None:
    assert csv_cell(cell) == written


def test_csv_leaves_numeric_columns_alone() -> None:
    frame = pd.DataFrame({"module": ["=cmd", "ok"], "change_pct": [-12.5, 3.0],
                          "runs": pd.array([1, None], dtype="Int64"), "ok": [True, False]})
    assert frame_text(frame, "csv") == ("module,change_pct,runs,ok\n'=cmd,-12.5,1,True\n"
                                        "ok,3.0,,False\n")


def test_json_escapes_controls_and_reads_back_the_same() -> None:
    name = "evil\x1b]0;x\x07\x9b\u202e\u2066\n\tµs"
    frame = pd.DataFrame({"module": [name], "ns": [-1.0]})
    for indent in (None, 2):
        text = frame_text(frame, "json", indent=indent)
        assert printable(text.replace("\n", "")) == text.replace("\n", "")  # nothing raw
        assert json.loads(text) == [{"module": name, "ns": -1.0}]
    assert json_escaped(json.dumps(["\u202e"], ensure_ascii=False)) == '["\\u202e"]'


def test_printable_escapes_c1_bidi_and_separators() -> None:
    assert printable("a\x9b\u061c\u2028\u2066b µ") == "a\\x9b\\u061c\\u2028\\u2066b µ"
