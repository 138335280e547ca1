"""Attribution: the NVTX ranges around each kernel -> its module, direction, op and labels.

A kernel's module is its innermost push/pop range in domain ``torch_nsight`` that names a
module (see :mod:`torch_nsight.naming`); its op is the innermost ``op:`` range, else NCCL's
own range (``ncclAllReduce``) for a communication kernel. The sweep's label range
(``sweep;variant=..;shape=..;run=..``) gives ``variant``, ``shape`` and ``run``; the bare
``measure`` marker range is dropped. Every other enclosing range (another domain's, a
``warmup`` range, a user's own) becomes ``context``. A kernel outside every module range
is named after its op where it has one (:func:`~torch_nsight.vocabulary.outside_module`:
``(outside) cross_entropy``, direction that of its op range: ``bwd`` inside
``bwd:op:cross_entropy``); the others are kept, as :data:`UNATTRIBUTED`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from torch_nsight import naming
from torch_nsight.analyze.columns import needs
from torch_nsight.analyze.frames import own
from torch_nsight.vocabulary import CONTEXT_SEP, UNATTRIBUTED, join_path, outside_module

ATTRIBUTION_COLUMNS = ("variant", "shape", "run", "module", "module_path", "depth",
                       "direction", "op", "context")


def _measure(message: str) -> dict[str, str] | None:
    """Labels of a sweep range; ``{}`` for the bare ``measure`` marker; None otherwise."""
    if message == naming.MEASURE_MESSAGE:
        return {}
    return naming.parse_measure_range(message)


#: NCCL's NVTX ranges (its own domain) that name a collective (``ncclAllReduce``), not its
#: set-up (``ncclCommInitRankConfig``, open around the first steps' kernels).
NCCL_COLLECTIVE = re.compile(r"^nccl(AllReduce|AllGather|ReduceScatter|Reduce|Broadcast|"
                             r"AllToAll|Send|Recv|Gather|Scatter)")


def attribute_ranges(stack: Sequence[str], start_end: Sequence[str],
                     other: Sequence[str]) -> tuple[Any, ...]:
    """Attribute one kernel from its NVTX ranges.

    Args:
        stack: push/pop range messages of domain ``torch_nsight``, outermost first.
        start_end: start/end range messages of domain ``torch_nsight``.
        other: range messages of every other domain.

    Returns:
        A tuple in the order of :data:`ATTRIBUTION_COLUMNS`.
    """
    return _attributed(_stack_facts(stack), _start_end_facts(start_end), other)


#: What a push/pop range stack says (:func:`_stack_facts`): the innermost sweep labels,
#: (module, direction, path, depth) of its innermost module, its op and op direction, and
#: the messages that are context.
StackFacts = tuple[dict[str, str] | None, tuple[str, str | None, str, int] | None, str | None,
                   str | None, tuple[str, ...]]


def _stack_facts(stack: Sequence[str]) -> StackFacts:
    """The facts of a range stack alone: a table's launches share a few thousand stacks,
    each worked out once (:func:`attribute`)."""
    measure: dict[str, str] | None = None
    modules: list[naming.RangeKind] = []
    op = None
    op_direction: str | None = None
    context: list[str] = []
    for message in stack:
        parsed = _measure(message)
        if parsed is not None:
            measure = parsed or measure
            continue
        if message == naming.WARMUP_MESSAGE:
            context.append(message)
            continue
        kind = naming.parse_message(message)
        if kind.kind == "op":
            op, op_direction = kind.name, kind.direction
        elif kind.kind == "compiled":  # a compiled graph whose kernel map was not carried
            context.append(message)
        else:
            modules.append(kind)
    placed = ((modules[-1].name, modules[-1].direction, join_path(m.name for m in modules),
               len(modules) - 1) if modules else None)
    return measure, placed, op, op_direction, tuple(context)


def _start_end_facts(start_end: Sequence[str]) -> tuple[dict[str, str] | None, tuple[str, ...]]:
    """The sweep labels of the start/end ranges (the innermost given) and their context."""
    measure: dict[str, str] | None = None
    context: list[str] = []
    for message in start_end:
        parsed = _measure(message)
        if parsed is None:
            context.append(message)
        elif parsed:
            measure = parsed
    return measure, tuple(context)


def _attributed(stack: StackFacts, start_end: tuple[dict[str, str] | None, tuple[str, ...]],
                other: Sequence[str]) -> tuple[Any, ...]:
    """:func:`attribute_ranges` from the facts of the stack and of the start/end ranges: a
    label of the stack wins over theirs; context is theirs, the stack's, then ``other``."""
    labels, placed, op, op_direction, stack_context = stack
    outer, context = start_end
    if op is None and other:  # NCCL names its own calls (ncclAllReduce): the kernel's op
        op = next((m for m in reversed(other) if NCCL_COLLECTIVE.match(m)), None)
    direction: str | None
    if placed is not None:
        module, direction, path, depth = placed
    elif op is not None:  # outside every module: the row of the call that launched it
        module = path = outside_module(op)
        direction, depth = op_direction, 0
    else:
        module, direction, path, depth = UNATTRIBUTED, None, UNATTRIBUTED, 0
    measure = labels or outer or {}
    run = measure.get("run", "")
    return (measure.get("variant") or None, measure.get("shape") or None,
            int(run) if run.lstrip("-").isdigit() else None, module, path, depth, direction,
            op, CONTEXT_SEP.join([*context, *stack_context, *other]) or None)


@needs("range_stack")
def attribute(df: pd.DataFrame) -> pd.DataFrame:
    """Add the attribution columns (:data:`ATTRIBUTION_COLUMNS`) from the NVTX columns.

    Args:
        df: a kernel table with ``range_stack``, ``range_start_end`` and ``range_other`` (tuples
            of messages); a missing one counts as empty.

    Returns:
        A copy with ``variant``, ``shape``, ``run`` (from the innermost sweep label range),
        ``module``, ``module_path`` (module names outermost first, joined by ``/``),
        ``depth`` (0 for the root), ``direction`` (``fwd``/``bwd``/``step``), ``op`` and
        ``context``.
    """
    out = own(df)
    empty: tuple[str, ...] = ()
    columns = [out[c] if c in out else pd.Series([empty] * len(out), index=out.index)
               for c in ("range_stack", "range_start_end", "range_other")]
    distinct = _distinct_ranges([c.to_numpy(dtype=object) for c in columns])
    if distinct is None:  # values pandas cannot tell apart (lists, arrays): row by row
        answers, inverse = _attributed_rows(columns), None
    else:  # each distinct triple of range tuples worked out once
        keys, inverse = distinct
        answers = _attributed_rows(keys)
    values = list(zip(*answers, strict=True)) if answers else [()] * len(ATTRIBUTION_COLUMNS)
    for column, column_values in zip(ATTRIBUTION_COLUMNS, values, strict=True):
        dtype = "Int64" if column in ("run", "depth") else object
        taken = (list(column_values) if inverse is None
                 else np.array(column_values, dtype=object)[inverse])
        out[column] = pd.Series(taken, index=out.index, dtype=dtype)
    return out


def _distinct_ranges(columns: list[np.ndarray]
                     ) -> tuple[list[tuple[Any, ...]], np.ndarray] | None:
    """The distinct (stack, start/end, other) triples of the rows, as tuples (None counts as
    no range), and each row's number among them; None where a value cannot be hashed (a
    list) or is missing otherwise than as None (the row-by-row path says what it is).

    A large trace's 66,000 launches hold 30,000 distinct triples: pandas tells them apart
    (``factorize``), Python works each out once."""
    codes, uniques = [], []
    for values in columns:
        try:
            code, unique = pd.factorize(values)
        except TypeError:
            return None
        missing = code < 0
        if missing.any() and any(v is not None for v in values[missing]):
            return None
        codes.append(np.where(missing, len(unique), code).astype(np.int64))
        uniques.append([tuple(v) for v in unique] + [()])
    sizes = [len(u) for u in uniques]
    combined = (codes[0] * sizes[1] + codes[1]) * sizes[2] + codes[2]
    numbers, inverse = np.unique(combined, return_inverse=True)
    keys = []
    for number in numbers.tolist():
        rest, other = divmod(number, sizes[2])
        stack, start_end = divmod(rest, sizes[1])
        keys.append((uniques[0][stack], uniques[1][start_end], uniques[2][other]))
    return keys, inverse.reshape(-1)


def _attributed_rows(rows: Any) -> list[tuple[Any, ...]]:
    """:func:`attribute_ranges` of each (stack, start/end, other) of ``rows`` (a list of
    triples, or the three columns), each distinct stack and start/end worked out once."""
    if not isinstance(rows, list):
        rows = zip(*(c.tolist() for c in rows), strict=True)
    memo: dict[Any, tuple[Any, ...]] = {}
    stacks: dict[tuple[str, ...], StackFacts] = {}
    outer: dict[tuple[str, ...], tuple[dict[str, str] | None, tuple[str, ...]]] = {}
    answers = []
    for given in rows:
        key = tuple(tuple(v) if v is not None else () for v in given)
        if key not in memo:
            if key[0] not in stacks:
                stacks[key[0]] = _stack_facts(key[0])
            if key[1] not in outer:
                outer[key[1]] = _start_end_facts(key[1])
            memo[key] = _attributed(stacks[key[0]], outer[key[1]], key[2])
        answers.append(memo[key])
    return answers


def label_shapes(df: pd.DataFrame, labels: Mapping[str, str]) -> pd.DataFrame:
    """Fill ``shape`` from a per-report label wherever no ``measure`` range gave one.

    Args:
        df: an attributed kernel table with ``source`` and ``shape``.
        labels: report path (as in ``source``) -> shape label.

    Returns:
        A copy with ``shape`` filled.
    """
    out = own(df)
    shapes = out["shape"] if "shape" in out else pd.Series(None, index=out.index, dtype=object)
    filled = [shape if isinstance(shape, str) else labels.get(source)
              for shape, source in zip(shapes, out["source"], strict=True)]
    out["shape"] = pd.Series(filled, index=out.index, dtype=object)
    return out


def label_rows(df: pd.DataFrame, label: str) -> pd.DataFrame:
    """Label every row of one source: its ``shape`` where it has none, else its ``variant``
    (``variant:label`` where it has one), so that the rows of different runs never fall
    into one (variant, shape) group.

    Args:
        df: an attributed table (kernels or calls) of one source, with ``source``.
        label: the source's label.

    Returns:
        A copy, labelled.
    """
    out = own(df)
    shapes = out["shape"] if "shape" in out else pd.Series(None, index=out.index, dtype=object)
    variants = (out["variant"] if "variant" in out
                else pd.Series(None, index=out.index, dtype=object))
    has_shape = shapes.map(lambda v: isinstance(v, str) and v != "")
    out["variant"] = pd.Series(
        [(f"{v}:{label}" if isinstance(v, str) and v else label) if ok else v
         for v, ok in zip(variants, has_shape, strict=True)], index=out.index, dtype=object)
    out["shape"] = shapes.where(has_shape, None)
    return label_shapes(out, dict.fromkeys(out["source"], label))
