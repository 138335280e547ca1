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
no switch of its own: ``--verify`` measures the cast.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import pandas as pd

from torch_nsight.analyze.fold import folded_name, index_template

__all__ = ["GROUPED_OPS", "cast_first"]

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
    """``found`` (finding rows with codes) with each ``compile_model`` fix turned into
    ``cast_then_compile`` where a ``cast_to_half`` finding of the same table names a grouped
    GEMM; its parameters name those findings' modules, ops and dtype. Unchanged otherwise."""
    if found.empty or "fix_code" not in found or "fix_params" not in found:
        return found
    casts = found[found["fix_code"].eq("cast_to_half")]
    ops = [_grouped(p) for p in casts["fix_params"]]
    casts = casts[[bool(o) for o in ops]]
    target = found["fix_code"].eq("compile_model")
    if casts.empty or not target.any():
        return found
    first = casts["fix_params"].iat[0]
    params: dict[str, Any] = {
        "modules": _folded(dict.fromkeys(str(m) for m in casts["module"])),
        "ops": sorted({op for o in ops for op in o}),
        "dtype": first.get("dtype") if isinstance(first, Mapping) else None}
    out = found.copy()
    out.loc[target, "fix_code"] = "cast_then_compile"
    out["fix_params"] = [dict(params) if hit else p
                         for hit, p in zip(target, out["fix_params"], strict=True)]
    return out
