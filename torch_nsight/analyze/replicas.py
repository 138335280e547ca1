"""Copy the measured rows of a representative sibling to the siblings it stands for.

The sweep's sibling check (:mod:`torch_nsight.capture.replicas.siblings`) leaves the replicas
out of replay;
:func:`expand_replicas` gives each of them the representative's rows back, renamed, with
``replicated_from`` naming the module that was actually measured, so every kernel of the
model still has a row. A launch that ``profile --replicate-launches`` did not profile
(``representative_index``, :mod:`torch_nsight.report.launch_replicas`) names the module of
the launch whose counters it carries the same way (:func:`name_launch_representatives`).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from torch_nsight import naming
from torch_nsight.analyze.columns import needs
from torch_nsight.analyze.frames import filled, own
from torch_nsight.naming import is_inside
from torch_nsight.vocabulary import REPRESENTATIVE_INDEX, join_path, split_path

if TYPE_CHECKING:
    import pandas as pd

logger = logging.getLogger(__name__)


def _rename(name: Any, old: str, new: str) -> Any:
    if not isinstance(name, str):
        return name
    for prefix in (naming.BACKWARD_PREFIX, ""):
        if name.startswith(prefix) and is_inside(name[len(prefix):], old):
            return prefix + new + name[len(prefix) + len(old):]
    return name


def _rename_path(path: Any, old: str, new: str) -> Any:
    if not isinstance(path, str):
        return path
    return join_path(_rename(part, old, new) for part in split_path(path))


def _renamed(rows: pd.DataFrame, old: str, new: str) -> pd.DataFrame:
    """``rows`` (a copy) moved from module ``old`` to module ``new``, marked as replicated."""
    rows["replicated_from"] = rows["replicated_from"].mask(rows["replicated_from"].isna(),
                                                            rows["module"])
    rows["module"] = [_rename(m, old, new) for m in rows["module"]]
    if "module_path" in rows:
        rows["module_path"] = [_rename_path(p, old, new) for p in rows["module_path"]]
    if "range_stack" in rows:
        rows["range_stack"] = [tuple(_rename(m, old, new) for m in s)
                              if isinstance(s, (tuple, list)) else s for s in rows["range_stack"]]
    return rows


def _values(frame: pd.DataFrame, column: str) -> list[Any]:
    return list(frame[column]) if column in frame else [None] * len(frame)


def name_launch_representatives(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` (owned) with a ``replicated_from`` column: for a row that carries another
    launch's counters (``representative_index``: that row's ``kernel_index`` in the same
    source), the module of that launch; None elsewhere."""
    import pandas as pd

    if "replicated_from" not in df:
        df["replicated_from"] = pd.Series([None] * len(df), index=df.index, dtype=object)
    if REPRESENTATIVE_INDEX not in df or df.empty:
        return df
    copied = df[REPRESENTATIVE_INDEX].notna()
    measured = df[~copied]
    module_of = dict(zip(zip(measured["source"], measured["kernel_index"], strict=True),
                         measured["module"], strict=True))
    found = [module_of.get((s, k)) for s, k in zip(df.loc[copied, "source"],
                                                    df.loc[copied, REPRESENTATIVE_INDEX],
                                                    strict=True)]
    df.loc[copied, "replicated_from"] = pd.Series(found, index=df.index[copied], dtype=object)
    return df


@needs("module", "direction")
def expand_replicas(df: pd.DataFrame, groups: Sequence[Mapping[str, Any]]) -> pd.DataFrame:
    """Copy each representative's kernel rows to its replicas.

    Args:
        df: an attributed kernel table (``variant``, ``shape``, ``run``, ``module``,
            ``direction``; ``module_path`` and ``range_stack`` are rewritten when present).
        groups: dicts with ``representative``, ``replicas`` and the ``variant`` and
            ``shape`` labels they hold for (``""``/None: rows without that label).

    Returns:
        A copy with the new rows appended and a ``replicated_from`` column: None for
        measured rows, else the module whose kernel was measured. A replica that already has
        rows for a (run, direction) - its kernels were profiled after all - gets no copies
        there. Nested groups (inside a representative) are expanded first.
    """
    import pandas as pd

    out = name_launch_representatives(own(df))
    if out.empty or not groups:
        return out

    def label(column: str) -> pd.Series:
        if column not in out:
            return pd.Series([""] * len(out), index=out.index)
        return filled(out[column]).astype(str)

    ordered = sorted(groups, key=lambda g: -str(g["representative"]).count("."))
    for group in ordered:
        variant, shape = label("variant"), label("shape")
        rows_here = (variant == str(group.get("variant") or "")) & \
                    (shape == str(group.get("shape") or ""))
        modules = out["module"].astype(object)
        rep = str(group["representative"])
        source = out[rows_here & modules.map(lambda m, r=rep: isinstance(m, str)
                                             and is_inside(m, r))]
        if source.empty:
            logger.debug("no rows for representative %s of %s/%s", rep,
                         group.get("variant"), group.get("shape"))
            continue
        keys = list(zip(_values(source, "run"), _values(source, "direction"), strict=True))
        copies = []
        for replica in group["replicas"]:
            mine = out[rows_here & modules.map(lambda m, r=replica: isinstance(m, str)
                                               and is_inside(m, r))]
            present = set(zip(_values(mine, "run"), _values(mine, "direction"), strict=True))
            keep = [key not in present for key in keys]
            copy = source.loc[keep].copy()
            if copy.empty:
                continue
            copies.append(_renamed(copy, rep, replica))
        if copies:
            out = pd.concat([out, *copies], ignore_index=True)
    return out
