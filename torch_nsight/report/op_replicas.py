"""The op calls a profiled step repeated, given back their rows
(:mod:`torch_nsight.capture.replicas.op_calls` left them out of ncu's replay).

The report carries the list of calls left out (:data:`~torch_nsight.formats.OP_REPLICAS_PREFIX`):
for each, the number of the call it repeats, the number of the last call profiled before it
and its module ranges. The rows of each profiled call carry its number among their other
ranges (:data:`~torch_nsight.naming.CALL_PREFIX`). :func:`with_op_replicas` copies the rows of
the call repeated to each call left out, after the rows of the call profiled before it, with
its own module ranges and ``representative_index`` naming the row measured (its
``kernel_index``), and takes the numbers out of the rows' ranges::

    call  op          ncu rows                 table
    0     conv  3x3   0 (call 0)      ->       0                (measured)
    1     batch_norm  1 (call 1)      ->       1                (measured)
    2     conv  3x3   (left out: repeats 0) -> copy of 0, module of call 2
"""

from __future__ import annotations

import bisect
import logging
from pathlib import Path
from typing import Any

import pandas as pd

from torch_nsight import formats, naming
from torch_nsight.report.compiled_attribution import take_carried
from torch_nsight.vocabulary import REPRESENTATIVE_INDEX

logger = logging.getLogger(__name__)



def split_carried_op_replicas(frame: pd.DataFrame, path: Path
                              ) -> tuple[pd.DataFrame, dict[str, Any] | None]:
    """Take the list of op calls left out out of the report (its carrier kernel too).

    Returns:
        (the table without the carrier kernel, the list's document or None). A damaged
        message is logged and skipped.
    """
    frame, messages = take_carried(frame, formats.OP_REPLICAS_PREFIX)
    for message in messages:
        try:
            document = formats.unpack_message(message, formats.OP_REPLICAS_PREFIX,
                                              formats.OP_REPLICAS_KIND)
            return frame, _checked(document)
        except formats.FormatError as err:
            logger.warning("%s: the op calls ncu left out have no rows: %s", path.name, err)
    return frame, None


def _checked(document: dict[str, Any]) -> dict[str, Any]:
    """``document`` if its lists hold what :func:`with_op_replicas` reads."""
    stacks, replicas = document.get("stacks"), document.get("replicas")
    if not (isinstance(stacks, list) and all(isinstance(s, list) and all(
            isinstance(m, str) for m in s) for s in stacks)):
        raise formats.FormatError("its module ranges are not lists of names")
    calls = document.get("calls")
    if type(calls) is not int:
        raise formats.FormatError("it does not say how many op calls the step made")
    if not (isinstance(replicas, list) and len(replicas) <= calls and all(
            isinstance(r, list) and len(r) == 3 and all(type(v) is int for v in r)
            and 0 <= r[0] <= r[1] < calls and 0 <= r[2] < len(stacks) for r in replicas)):
        raise formats.FormatError(f"its calls are not [call, call before, ranges] numbers "
                                  f"of the step's {calls} op calls")
    return document


def _call_number(others: Any) -> int | None:
    for message in others or ():
        if isinstance(message, str) and message.startswith(naming.CALL_PREFIX):
            number = message[len(naming.CALL_PREFIX):]
            return int(number) if number.isascii() and number.isdigit() else None
    return None


def with_op_replicas(frame: pd.DataFrame, document: dict[str, Any] | None,
                     path: Path) -> pd.DataFrame:
    """``frame`` with a row for every kernel of the op calls ncu left out (see the module
    docstring), the call numbers taken out of ``range_other``; unchanged where no row
    carries a call number."""
    if frame.empty or "range_other" not in frame:
        return frame
    numbers = [_call_number(o) for o in frame["range_other"]]
    if all(n is None for n in numbers):
        if document is not None:
            logger.warning("%s: no kernel carries its op call's number: the %d op calls ncu "
                           "left out have no rows", path.name, len(document["replicas"]))
        return frame
    frame = frame.copy()
    frame["range_other"] = [tuple(m for m in o or () if not (isinstance(m, str)
                                                             and m.startswith(naming.CALL_PREFIX)))
                            for o in frame["range_other"]]
    if document is None:  # the step carries its list, empty or not, when it numbers its calls
        logger.warning("%s: its kernels carry op call numbers but not the list of the calls "
                       "ncu left out: those calls' kernels have no rows (profile with "
                       "--no-replicate to measure every launch)", path.name)
        return frame
    order = frame.assign(_call=numbers).sort_values(["range_index", "kernel_index"],
                                                    kind="stable").reset_index(drop=True)
    rows_of: dict[int, list[int]] = {}
    for position, number in enumerate(order["_call"]):
        if number is not None and not pd.isna(number):
            rows_of.setdefault(int(number), []).append(position)
    called = sorted(rows_of)
    last_before = _running_last(called, rows_of)
    sources, anchors, places = [], [], []
    for repeats, before, place in document["replicas"]:
        at = bisect.bisect_right(called, before) - 1
        anchor = last_before[at] if at >= 0 else -1
        for position in rows_of.get(repeats, ()):
            sources.append(position)
            anchors.append(anchor)
            places.append(tuple(document["stacks"][place]))
    return _merged(order.drop(columns="_call"), sources, anchors, places, path)


def _running_last(called: list[int], rows_of: dict[int, list[int]]) -> list[int]:
    """For each call number in ``called`` (sorted), the last row of it or of any call
    before it."""
    out, last = [], -1
    for number in called:
        last = max(last, rows_of[number][-1])
        out.append(last)
    return out


def _merged(order: pd.DataFrame, sources: list[int], anchors: list[int],
            places: list[tuple[str, ...]], path: Path) -> pd.DataFrame:
    """``order`` with the copies of rows ``sources`` placed after rows ``anchors``, each in
    the module ranges of ``places``."""
    if REPRESENTATIVE_INDEX not in order:
        order[REPRESENTATIVE_INDEX] = float("nan")
    if not sources:
        return order
    copies = order.iloc[sources].reset_index(drop=True)  # a call's rows, once per repeat
    copies[REPRESENTATIVE_INDEX] = copies["kernel_index"].astype(float)
    copies["range_stack"] = pd.Series(places, dtype=object)
    position = pd.Series(range(len(order)), dtype=float)
    # a copy sorts after its anchor row and before the row after it, in the calls' order
    place = pd.Series(anchors, dtype=float) + 0.5 + pd.Series(range(len(sources)),
                                                              dtype=float) / (2 * len(sources))
    merged = pd.concat([order.assign(_at=position.values),
                        copies.assign(_at=place.values)], ignore_index=True)
    merged = merged.sort_values("_at", kind="stable").drop(columns="_at")
    logger.info("%s: %d kernel rows copied to the op calls ncu left out", path.name,
                len(copies))
    return merged.reset_index(drop=True)
