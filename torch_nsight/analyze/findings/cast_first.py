"""A whole model's compile where the step's grouped GEMMs ran fp32 beside 16-bit GEMMs.

Autocast leaves ``_grouped_mm`` in the dtype it is given, so a mixture-of-experts step under
bf16 autocast runs its experts in fp32 (``fp32_no_tensor_cores`` with ``cast_to_half``).
Compiled that way, the model's graph breaks in every expert layer: on three such steps
(Mixtral-style, Qwen2-MoE, OLMoE; H200, docs/zoo.md) Inductor failed on Hugging Face's
grouped-GEMM fallback for the fp32 experts (``aten._local_scalar_dense``, a break per layer)
and the compiled step ran 2.2-8.1 ms slower, where the step's idle time had promised up to
24 ms. The eager step never runs that fallback, so its calls table cannot show the break; what
it shows is the uncast grouped GEMM. Where a finding casts one, every ``compile_model`` fix
of the step becomes ``cast_then_compile`` (cast first, then compile and measure), which has
no switch of its own: ``--verify`` measures the cast. So does a compile of the model's root
module (``compile_module`` there), and the step-idle finding's compile
(:func:`cast_first_row`, before ``--verify`` picks its switch).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
import pandas as pd

from torch_nsight.analyze.findings.switch_fixes import fix_target
from torch_nsight.analyze.fold import folded_name, index_template
from torch_nsight.analyze.frames import filled
from torch_nsight.vocabulary import LABELS

__all__ = ["GROUPED_OPS", "cast_first", "cast_first_row"]

#: The grouped GEMM ops whose fp32 form breaks a compiled model's graph.
GROUPED_OPS = frozenset({"_grouped_mm"})


def _grouped(params: object) -> list[str]:
    """The grouped GEMM ops a ``cast_to_half`` fix's parameters name."""
    ops = params.get("ops") if isinstance(params, Mapping) else None
    return [str(op) for op in ops or () if str(op) in GROUPED_OPS]


def _folded(modules: Iterable[str]) -> list[str]:
    """Module names with their block indices folded (``model.layers.{0-3}.mlp.experts``)."""
    slots: dict[str, list[tuple[int, ...]]] = {}
    for module in modules:
        template, indices = index_template(module)
        slots.setdefault(template, []).append(indices)
    return [folded_name(template, indices) for template, indices in slots.items()]


def cast_first(found: pd.DataFrame) -> pd.DataFrame:
    """``found`` (finding rows with codes) with each fix that compiles the whole model
    (``compile_model``, ``compile_module`` of the root) turned into ``cast_then_compile``
    where a ``cast_to_half`` finding of the same (variant, shape) names a grouped GEMM (the
    reports of other models loaded beside it keep their compile); its parameters name those
    findings' modules, ops and dtype, and the compile's own fix code (``compile``).
    Unchanged otherwise."""
    if found.empty or "fix_code" not in found or "fix_params" not in found:
        return found
    keys = [c for c in LABELS if c in found]
    if not keys:
        return _cast_within(found, np.ones(len(found), dtype=bool))
    out = found
    for rows in filled(found[keys]).groupby(keys, sort=False).indices.values():
        mine = np.zeros(len(found), dtype=bool)
        mine[rows] = True
        out = _cast_within(out, mine)
    return out


def _cast_within(found: pd.DataFrame, mine: Any) -> pd.DataFrame:
    """:func:`cast_first` among the rows ``mine`` (a boolean mask) alone."""
    casts = found[mine & found["fix_code"].eq("cast_to_half").to_numpy()]
    ops = [_grouped(p) for p in casts["fix_params"]]
    casts = casts[[bool(o) for o in ops]]
    whole = [fix_target(path) == "" for path in found.get("module_path", found["module"])]
    target = mine & (found["fix_code"].eq("compile_model") | (
        found["fix_code"].eq("compile_module") & pd.Series(whole, index=found.index)))
    if casts.empty or not target.any():
        return found
    first = casts["fix_params"].iat[0]
    params: dict[str, Any] = {
        "modules": _folded(dict.fromkeys(str(m) for m in casts["module"])),
        "ops": sorted({op for o in ops for op in o}),
        "dtype": first.get("dtype") if isinstance(first, Mapping) else None}
    out = found.copy()
    out["fix_params"] = [{**params, "compile": code} if hit else p  # the compile it stands for
                         for hit, code, p in zip(target, out["fix_code"], out["fix_params"],
                                                 strict=True)]
    out.loc[target, "fix_code"] = "cast_then_compile"
    return out


def cast_first_row(found: pd.DataFrame, row: Mapping[str, Any]) -> dict[str, Any]:
    """``row``, a finding not in ``found`` (``step_idle``, made from the bare step), with its
    fix turned as :func:`cast_first` would turn it among ``found``'s findings."""
    columns = [*LABELS, "module", "module_path", "fix_code", "fix_params"]
    mine = pd.DataFrame([{c: row.get(c) for c in columns}], columns=columns, dtype=object)
    theirs = found.reindex(columns=columns).astype(object)
    last = cast_first(pd.concat([theirs, mine], ignore_index=True)).iloc[-1]
    return {**row, "fix_code": last["fix_code"], "fix_params": last["fix_params"]}
