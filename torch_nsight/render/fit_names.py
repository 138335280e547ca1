"""Names narrowed to fit a column (render/fit.py): on two lines at a ``.``, ``/``, ``_`` or
space, and only where two lines do not hold them cut, a module path keeping its start and
its distinguishing end (``model.layers.…`` over ``post_attention_layernorm ×8``); a label (a
shape, a variant) on two lines and never cut (``2x512x`` over ``256``)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from fractions import Fraction

from torch_nsight.units import shortened

__all__ = ["MAX_NAME_END", "name_lines", "label_lines", "distinguishing_width"]


#: The widest a name's distinguishing end (``…post_attention_layernorm ×8``) is kept.
MAX_NAME_END = 36


def distinguishing_width(cells: Sequence[str]) -> int:
    """The width a column of module names needs so that each keeps its last dotted part
    whole, with its ``×N`` and the ``…`` before it (at most :data:`MAX_NAME_END`)."""
    ends = [len(_last_part(str(c).replace("\n", ""))) + 1 for c in cells]
    return min(max(ends, default=0), MAX_NAME_END)


def _last_part(name: str) -> str:
    """A name's last dotted part with what follows it (``post_attention_layernorm ×8``)."""
    stem, space, count = name.partition(" ")
    return stem.rsplit(".", 1)[-1] + space + count


def _cut(text: str, limit: int, *, keep_end: bool) -> str:
    """``text`` in ``limit`` characters: its start and ``…``, or with ``keep_end`` its
    start, ``…`` and its end."""
    if keep_end:  # a module path's end says which it is: two thirds of it kept
        return shortened(text, limit, head=Fraction(1, 3))
    return text if len(text) <= limit else text[:limit - 1] + "…"


def name_lines(text: str, limit: int, *, keep_end: bool) -> str:
    """A name on at most two lines of ``limit`` characters, broken after a ``.``, ``/``,
    ``_`` or space. Where two lines do not hold it, the first line keeps its start and the
    second its end (``keep_end``: ``transformer.h.…`` over ``mlp.c_fc ×12``), or its next
    part ending in ``…``; neither line starts with ``…``."""
    text = text.replace("\n", "")
    if len(text) <= limit:
        return text
    if keep_end and (dotted := _dotted_lines(text, limit)):
        return dotted
    lines = [""]
    for piece in re.findall(r"[^./_ ]+[./_ ]?|[./_ ]", text):
        if lines[-1] and len(lines[-1]) + len(piece.rstrip()) > limit:
            lines.append("")
        lines[-1] += piece
    # a line keeps the space it broke at, so that joining the lines gives the name back
    if len(lines) <= 2 and all(len(line.rstrip()) <= limit for line in lines):
        if lines[-1].startswith("…") and len(lines[0]) < limit:  # a name cut before
            lines = [lines[0] + "…", lines[1][1:]]
        return "\n".join(lines)
    if len(lines[0]) > limit:  # no break in its first line's width
        return _cut(text, limit, keep_end=keep_end)
    first = lines[0].rstrip()
    rest = text[len(lines[0]):]
    if not keep_end:
        return first + "\n" + _cut(rest, limit, keep_end=False)
    while len(first) + 1 > limit:  # room for the "…" that says a part is left out
        first = first[:-1]
    tail = ""
    for piece in reversed(re.findall(r"[./_ ]?[^./_ ]+|[./_ ]", rest)):
        if len(tail) + len(piece) > limit:
            break
        tail = piece + tail
    tail = tail.lstrip(" ./_…") or rest[len(rest) - limit:]
    return first + "…\n" + tail


def _dotted_lines(text: str, limit: int) -> str | None:
    """A module path on two lines broken at a ``.``, or its start and ``…`` over its last
    whole dotted parts (``model.layers.…`` over ``post_attention_layernorm ×8``); None where
    its last part alone is wider than ``limit``."""
    parts = re.findall(r"[^.]+\.?|\.", text)
    for k in range(len(parts) - 1, 0, -1):  # the first line as full as it can be
        first, second = "".join(parts[:k]), "".join(parts[k:])
        if len(first) <= limit and len(second) <= limit:
            return f"{first}\n{second}"
    tail = ""
    for part in reversed(parts):
        if len(tail) + len(part) > limit:
            break
        tail = part + tail
    if not tail:
        return None
    head = ""
    for part in parts:
        if len(head) + len(part) + 1 > limit:
            break
        head += part
    return f"{head or text[:limit - 1]}…\n{tail}"


def label_lines(text: str, limit: int) -> str:
    """A label (a shape ``2x512x256``, ``batch:4,seq:128``, a variant ``channels_last``) on
    two lines of at most ``limit`` characters, broken after an ``x`` between digits, a
    ``,``, ``:``, ``_`` or space, the first line as full as it can be (``2x512x`` over
    ``256``); where no break gives two lines that fit, the break that gives the narrowest
    two lines (or none). Joining the lines gives the label back."""
    text = text.replace("\n", "")
    if len(text) <= limit:
        return text
    pairs = [(text[:m.end()], text[m.end():])
             for m in re.finditer(r"(?<=\d)x(?=\d)|[,:_ ]", text)]
    fitting = [p for p in pairs if len(p[0].rstrip()) <= limit and len(p[1]) <= limit]
    if fitting:
        return "\n".join(fitting[-1])
    narrowest = min(pairs, key=lambda p: max(len(p[0].rstrip()), len(p[1])), default=None)
    if narrowest is None or max(len(narrowest[0].rstrip()), len(narrowest[1])) >= len(text):
        return text
    return "\n".join(narrowest)
