"""Checks of what a reader takes from a file: numbers, JSON documents and fields.

Every reader (traces, saved profiles, sweep and timeline manifests, calls files) checks the
values it takes here, so that a damaged or hostile file ends in the library's own error
(naming the file, the field and what to do) or in values left out with one counted
warning, never in a traceback or a number that is not a measurement. Stage-neutral: no
torch, no pandas.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
from collections import Counter
from collections.abc import Iterator
from contextvars import ContextVar
from typing import Any

from torch_nsight.errors import ReportError

logger = logging.getLogger(__name__)

__all__ = ["number", "whole", "loads_json", "field", "check_schema", "LeftOut", "NUMBER",
           "WHOLE", "damage_refused", "say_left_out"]

#: The advice of a damaged file's error.
DAMAGED = "the file is damaged: record it again, or restore it from a copy"


#: The largest magnitude a reader takes as a measurement (a time in ns, a byte or FLOP
#: count): beyond it a value is damage, and sums of such values would overflow to inf.
LARGEST = 1e30


def number(value: Any, *, minimum: float | None = 0.0,
           maximum: float = LARGEST) -> float | None:
    """``value`` as a float if it is a finite real number (not a bool, not text) between
    ``minimum`` (None: any) and ``maximum``, else None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        result = float(value)
    except OverflowError:  # an int too large for a float
        return None
    if not math.isfinite(result) or (minimum is not None and result < minimum) \
            or abs(result) > maximum:
        return None
    return result


def whole(value: Any, *, minimum: int | None = 0, maximum: int = 2**63 - 1) -> int | None:
    """``value`` as an int if it is an integral number (``3`` or ``3.0``, not a bool, not
    text) between ``minimum`` (None: any) and ``maximum``, else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, float):
        if not math.isfinite(value) or not value.is_integer():
            return None
        value = int(value)
    if not isinstance(value, int) or (minimum is not None and value < minimum) \
            or abs(value) > maximum:
        return None
    return value


def loads_json(text: str | bytes, where: str, what: str) -> Any:
    """Parse JSON read from ``where`` (a file, or a field of one).

    Raises:
        ReportError: it is not JSON, or nested too deeply to read.
    """
    try:
        return json.loads(text)
    except RecursionError:
        raise ReportError(f"{where} is not a readable {what}: its JSON is nested too deeply; "
                          f"{DAMAGED}") from None
    except (ValueError, UnicodeDecodeError) as err:  # JSONDecodeError is a ValueError
        raise ReportError(f"{where} is not a readable {what}: it is not JSON ({err}); "
                          f"{DAMAGED}") from err


def field(data: Any, key: str, kind: type | tuple[type, ...], where: str, *,
          default: Any = None) -> Any:
    """``data[key]`` checked to be of ``kind`` (``default`` when missing or None).

    Raises:
        ReportError: ``data`` is not a JSON object, or the field holds another type.
    """
    if not isinstance(data, dict):
        raise ReportError(f"{where}: expected a JSON object, found {_json_type(data)}; "
                          f"{DAMAGED}")
    value = data.get(key)
    if value is None:
        return default
    if isinstance(value, bool) and bool not in (kind if isinstance(kind, tuple) else (kind,)):
        value = None  # True is an int to isinstance, never to a reader
    if value is None or not isinstance(value, kind):
        raise ReportError(f"{where}: field {key!r} holds {_json_type(data.get(key))} where "
                          f"{_names(kind)} belongs; {DAMAGED}")
    return value


#: In a schema: a finite, non-negative number; a whole, non-negative number.
NUMBER = "a finite, non-negative number"
WHOLE = "a whole, non-negative number"


def check_schema(value: Any, schema: Any, where: str, path: str = "", *,
                 item: bool = False) -> None:
    """Check a JSON document against a schema; null (None) is accepted everywhere.

    A schema is a type (or tuple of types), :data:`NUMBER`, :data:`WHOLE`, ``[item
    schema]`` for a list (whose items are never null), or ``{key: schema}`` for an object
    whose other keys are free.

    Raises:
        ReportError: naming ``where``, the field's path and what it holds instead.
    """
    if value is None and not item:
        return
    if isinstance(schema, dict):
        if isinstance(value, dict):
            for key, item in schema.items():
                check_schema(value.get(key), item, where, f"{path}.{key}" if path else key)
            return
        expected = "an object"
    elif isinstance(schema, list):
        if isinstance(value, list):
            for index, entry in enumerate(value):
                check_schema(entry, schema[0], where, f"{path}[{index}]", item=True)
            return
        expected = "a list"
    elif schema is NUMBER or schema is WHOLE:
        if (number if schema is NUMBER else whole)(value) is not None:
            return
        expected = schema
    else:
        if isinstance(value, schema) and not (isinstance(value, bool) and schema is not bool):
            return
        expected = _names(schema)
    raise ReportError(f"{where}: field {path or '(the document)'!r} holds "
                      f"{_json_type(value)} where {expected} belongs; {DAMAGED}")


def _json_type(value: Any) -> str:
    names = {dict: "an object", list: "a list", str: "text", bool: "true/false",
             int: "a number", float: "a number", type(None): "null"}
    return names.get(type(value), type(value).__name__)


def _names(kind: type | tuple[type, ...]) -> str:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    return " or ".join(dict.fromkeys(_json_type(k()) for k in kinds))


class LeftOut:
    """What a reader left out of one file, counted by reason, and warned about once.

    ``LeftOut("run.json").add("kernel", "invalid durations")`` three times, then
    :meth:`warn`, logs "run.json: 3 kernel events with invalid durations left out".
    """

    def __init__(self, where: str, unit: str = "events") -> None:
        self.where = where
        self.unit = unit
        self.counts: Counter[tuple[str, str]] = Counter()

    def add(self, what: str, why: str, count: int = 1) -> None:
        """Count ``count`` items of kind ``what`` left out for reason ``why``."""
        if count:
            self.counts[(what, why)] += count

    def __bool__(self) -> bool:
        return bool(self.counts)

    def describe(self) -> str:
        """The one sentence :meth:`warn` logs ("" when nothing was left out)."""
        parts = [f"{n} {what} {self.unit} with {why}".replace("  ", " ")
                 for (what, why), n in self.counts.items()]
        return f"{self.where}: {'; '.join(parts)} left out" if parts else ""

    def warn(self) -> None:
        """Log what was left out, in one warning (nothing when nothing was)."""
        if self.counts:
            say_left_out(self.describe())


#: Within :func:`damage_refused`: what a reader left out is an error, not a warning.
_REFUSING: ContextVar[bool] = ContextVar("torch_nsight_refusing_damage", default=False)


@contextlib.contextmanager
def damage_refused(refuse: bool = True) -> Iterator[None]:
    """Within it (with ``refuse``), a reader that leaves records of a damaged file out
    (:func:`say_left_out`) raises instead of warning: a comparison, a gate, must not read
    a file cut short as a faster run. Scoped to the reading that asks it
    (:attr:`~torch_nsight.report.source_base.ReadOptions.strict`); contexts apart (threads,
    tasks) are not affected."""
    token = _REFUSING.set(refuse)
    try:
        yield
    finally:
        _REFUSING.reset(token)


def say_left_out(sentence: str, log: logging.Logger = logger) -> None:
    """Warn of what a reader left out of a damaged file (``sentence`` names it) on ``log``;
    within :func:`damage_refused`, refuse it.

    Raises:
        ReportError: within :func:`damage_refused`.
    """
    if _REFUSING.get():
        raise ReportError(f"{sentence}: {DAMAGED}")
    log.warning("%s", sentence)
