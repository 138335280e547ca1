"""Kernels of compiled graphs get their modules: the carried kernel maps joined to the
kernels run inside each ``compiled:<graph>@<root>`` range.

The capture side (:mod:`torch_nsight.capture.compiled.inductor`) runs each call of a compiled graph
inside one push/pop range and carries, per range message, the graph's launches in wrapper
order: ``[kernel, range messages of its module (outermost first), modules it fused]``.
Here each kernel inside such a range is matched to one launch:

* an Inductor kernel (``triton_*``) by its name, the next launch of that name;
* any other kernel (cuBLAS / nvjet GEMMs, SDPA, cuDNN, copies: the wrapper's extern calls)
  to the next extern launch before the next Inductor kernel, or, when there is none, to
  the launch before it (an extern call that ran several kernels).

A kernel that follows a kernel of another range starts a new call of the graph. The
matched kernel's compiled range is replaced by its launch's module ranges, so attribution
(:mod:`torch_nsight.analyze.attribute`) sees it as it would see an eager kernel::

    range_stack                                      ->  range_stack
    ("ViT", "compiled:g0@")                              ("ViT", "ViT", "blocks", "blocks.0",
                                                           "blocks.0.norm1")

and the column ``fused_modules`` lists the modules of a kernel Inductor fused across
modules (None otherwise). Where the map carries each launch's FLOPs, ``inductor_launch``
names the launch a kernel ran for (one id per launch and graph call), ``inductor_flops``
and ``inductor_dtype`` its FLOPs and their operand dtype (the analysis shares them among
the launch's kernels: :func:`torch_nsight.analyze.analytic.fill_flops_from_inductor`). A range without its map is left as it is (its kernels are
reported outside any module, with the range in their context).
"""

from __future__ import annotations

import bisect
import logging
from collections.abc import Sequence
from typing import Any

import pandas as pd

from torch_nsight import formats, naming
from torch_nsight.vocabulary import INDUCTOR_DTYPE, INDUCTOR_FLOPS, INDUCTOR_LAUNCH

logger = logging.getLogger(__name__)

__all__ = ["resolve_compiled", "take_carried", "read_maps", "compiled_at", "FUSED_COLUMN"]

FUSED_COLUMN = "fused_modules"
_INDUCTOR_PREFIX = "triton"


def take_carried(frame: pd.DataFrame, prefix: str) -> tuple[pd.DataFrame, list[str]]:
    """Take out the carrier kernels of the start/end ranges whose message starts with
    ``prefix`` (a fill kernel launched inside each: :mod:`torch_nsight.capture.calls.embed`).

    Returns:
        (the table without those carrier kernels, the distinct messages in order).
    """
    if frame.empty or "range_start_end" not in frame:
        return frame, []
    carrier = frame["range_start_end"].map(
        lambda ranges: next((m for m in ranges or () if m.startswith(prefix)), None))
    found = carrier.notna()
    if not found.any():
        return frame, []
    # the carrier is the fill kernel launched inside the range; other threads' kernels
    # that ran meanwhile stay
    fill = frame["kernel_full"].astype(str).str.contains("FillFunctor", regex=False)
    return (frame.loc[~(found & fill)].reset_index(drop=True),
            list(pd.unique(carrier[found])))


def read_maps(messages: Sequence[str], source: str) -> list[dict[str, Any]]:
    """The kernel maps in carried ``messages`` (damaged ones logged and skipped)."""
    maps = []
    for message in messages:
        try:
            document = formats.unpack_message(message, formats.COMPILED_MAP_PREFIX,
                                              formats.COMPILED_MAP_KIND)
        except formats.FormatError as err:
            logger.warning("%s: skipping a compiled graph's kernel map: %s", source, err)
            continue
        if isinstance(document.get("range"), str) and isinstance(document.get("launches"),
                                                                 list):
            maps.append(document)
    return maps


class _Cursor:
    """Where the kernels of one range message are in its graph's launches."""

    def __init__(self, launches: Sequence[Sequence[Any]]) -> None:
        self.launches = launches
        self.named: dict[str, list[int]] = {}
        self.externs: list[int] = []
        for index, launch in enumerate(launches):
            kernel = str(launch[0])
            if kernel.startswith(_INDUCTOR_PREFIX):
                self.named.setdefault(kernel, []).append(index)
            else:
                self.externs.append(index)
        self.named_all = sorted(i for positions in self.named.values() for i in positions)
        self.position = 0
        self.last: int | None = None
        self.calls = 0

    def restart(self) -> None:
        self.position, self.last = 0, None
        self.calls += 1

    def match(self, kernel: str) -> int | None:
        positions = self.named.get(kernel)
        if positions is not None:
            at = bisect.bisect_left(positions, self.position)
            index = positions[at] if at < len(positions) else positions[0]
        else:
            at = bisect.bisect_left(self.named_all, self.position)
            next_named = self.named_all[at] if at < len(self.named_all) else len(self.launches)
            at = bisect.bisect_left(self.externs, self.position)
            extern = self.externs[at] if at < len(self.externs) else None
            if extern is not None and extern < next_named:
                index = extern
            elif self.last is not None:
                return self.last  # another kernel of the same extern call
            elif self.externs:
                index = self.externs[0]
            else:
                return None
        self.position, self.last = index + 1, index
        return index


def compiled_at(stack: Sequence[str]) -> int | None:
    """Where in a range stack its innermost compiled graph's range is (None: none)."""
    for index in range(len(stack) - 1, -1, -1):
        if stack[index].startswith(naming.COMPILED_PREFIX):
            return index
    return None


def resolve_compiled(frame: pd.DataFrame, maps: Sequence[dict[str, Any]]) -> pd.DataFrame:
    """Give the kernels inside compiled graph ranges their modules (see the module
    docstring).

    Args:
        frame: a raw kernel table (``range_stack``, ``kernel_full``, ``kernel_index``; with
            ``launch_ns`` the launch order is taken from it).
        maps: the carried kernel maps (:func:`read_maps`).

    Returns:
        The table with those ranges replaced and ``fused_modules`` added (when any kernel
        ran in a compiled range); the input itself when none did.
    """
    if frame.empty or "range_stack" not in frame:
        return frame
    found: dict[tuple[str, ...], int | None] = {}  # launches share stacks: each seen once
    opened = [tuple(s or ()) for s in frame["range_stack"].tolist()]
    at = pd.Series([found[s] if s in found else found.setdefault(s, compiled_at(s))
                    for s in opened], index=frame.index, dtype=object)
    inside = at.notna()
    if not inside.any():
        return frame
    launches = {document["range"]: document["launches"] for document in maps}
    missing = sorted({frame.at[i, "range_stack"][int(at[i])] for i in frame.index[inside]}
                     - set(launches))
    if missing:
        logger.warning("%d compiled graph range(s) carry no kernel map (%s): their kernels "
                       "stay outside module ranges", len(missing), ", ".join(missing[:3]))
    order_columns = [c for c in ("source", "launch_ns", "kernel_index") if c in frame]
    name_column = "kernel_full" if "kernel_full" in frame else "kernel"  # `kernel` is cut short
    ordered = frame.sort_values(order_columns, kind="stable").index
    stacks = frame["range_stack"].copy()
    fused: list[Any] = [None] * len(frame)
    launch_ids: list[Any] = [None] * len(frame)
    launch_flops = [float("nan")] * len(frame)
    launch_dtypes: list[Any] = [None] * len(frame)
    positions = {index: n for n, index in enumerate(frame.index)}
    cursors: dict[tuple[Any, str], _Cursor] = {}
    previous: tuple[Any, str] | None = None
    for index in ordered:
        source = frame.at[index, "source"] if "source" in frame else None
        if not inside[index]:
            previous = None
            continue
        stack = tuple(frame.at[index, "range_stack"])
        where = int(at[index])
        key = (source, stack[where])
        if stack[where] not in launches:
            previous = key
            continue
        cursor = cursors.get(key)
        if cursor is None:
            cursor = cursors[key] = _Cursor(launches[stack[where]])
        elif previous != key:
            cursor.restart()  # a new call of the graph
        previous = key
        matched = cursor.match(str(frame.at[index, name_column]))
        if matched is None:
            continue
        launch = cursor.launches[matched]
        _, chain, modules = launch[:3]
        outer = stack[:where]  # eager ranges still open outside (per-block compile)
        stacks[index] = outer + tuple(m for m in chain if m not in outer) + stack[where + 1:]
        row = positions[index]
        fused[row] = tuple(modules) if modules else None
        if len(launch) >= 5 and isinstance(launch[3], (int, float)):
            launch_ids[row] = f"{stack[where]}\x1f{cursor.calls}\x1f{matched}"
            launch_flops[row], launch_dtypes[row] = float(launch[3]), str(launch[4])
    out = frame.copy()
    out["range_stack"] = stacks
    out[FUSED_COLUMN] = pd.Series(fused, index=frame.index, dtype=object)
    if any(launch is not None for launch in launch_ids):
        out[INDUCTOR_LAUNCH] = pd.Series(launch_ids, index=frame.index, dtype=object)
        out[INDUCTOR_FLOPS] = pd.Series(launch_flops, index=frame.index, dtype="float64")
        out[INDUCTOR_DTYPE] = pd.Series(launch_dtypes, index=frame.index, dtype=object)
    return out
