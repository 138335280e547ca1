"""A finding as a typed record: what is wrong, where, in what kind of module, why, and the
fix with its parameters, as codes and numbers. Render words it
(:mod:`torch_nsight.render.finding_words`); nothing in analyze reads those words back.

One record per finding, as a check returns it; :meth:`Finding.codes` gives the values of
:data:`~torch_nsight.vocabulary.FINDING_CODE_COLUMNS`::

    finding          module_kind  aten_ops     dim  dim_role      dim_value  layout  fix_code      fix_params
    gemm_misaligned  linear       ('mm',)      N    out_features  50257      None    pad_features  {'value': 50257, 'padded': 50304, 'in_features': 768}
    gemm_misaligned  conv         ('convolution',)  spatial  spatial  49     nchw    channels_last {}
    optimizer_not_fused  optimizer  ()         None None          None       None    optimizer_fused  {'optimizer': 'SGD', 'flag': 'fused'}
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from torch_nsight.analyze.findings.codes import (
    Cause,
    FindingCode,
    FixCode,
    Layout,
    ModuleKind,
    OptimizerImpl,
)
from torch_nsight.analyze.frames import plain

#: ``Finding.basis`` of a finding whose gain no model of its fix estimates: its bound only.
HEADROOM = "headroom"
NAN = float("nan")


@dataclass(frozen=True)
class Finding:
    """One finding, before it is worded.

    Attributes:
        finding: what is wrong (:data:`~.codes.FindingCode`).
        rows: the kernel rows it covers (the first names its site).
        gain_ns: the GPU time per run its fix recovers, by a model of what the fix changes
            (NaN when unknown).
        basis: how the gain was estimated: ``roofline`` (the fixed kernels at their
            roofline), ``removed`` (the time of the kernels the fix removes), ``calibrated``
            (their time times what the fix saved of it on a recorded pair) or
            ``headroom`` (no model of what the fix changes: ``gain_ns`` NaN, ``bound_ns``
            the most any fix of these kernels could recover).
        confidence: ``high``, ``medium`` or ``low``.
        fix_code: the change to make (:data:`~.codes.FixCode`); its parameters in
            ``fix_params``.
        cause: why (what a chain computes, what limits a launch), where a check knows.
        module_kind: the kind of module of the site (:func:`~.sites.site_kind`).
        module_class: the module's class where the profile records it (an optimizer's step
            range, the root module's range), else None.
        aten_ops: the aten ops of the site, from the calls table.
        shapes: the input shapes of the call at fault.
        dim: the dimension at fault (``M``, ``N``, ``K`` of a GEMM call; ``C_in``,
            ``C_out`` or ``HxW`` of a convolution).
        dim_role: what that dimension is (``out_features``, ``in_channels``, ``spatial``...).
        dim_value: its size.
        layout: the layout of the site's 4-D tensors (``nchw``, ``channels_last``).
        dtype: the data type of the call at fault (or the kernel's precision).
        optimizer: the optimizer's class, where its step range names it.
        optimizer_impl: how its step ran (``fused``, ``foreach``, ``for_loop``).
        fix_params: the fix's parameters (the padded size, the optimizer and its flag).
        facts: the numbers the evidence cites (ns, bytes, FLOPs, percent), by name.
        bound_ns: for a ``headroom`` gain, the kernels' time above their roofline: what no
            fix can beat, not what this one recovers (NaN otherwise).
    """

    finding: FindingCode
    rows: pd.DataFrame
    gain_ns: float
    basis: str
    confidence: str
    fix_code: FixCode
    cause: Cause | None = None
    module_kind: ModuleKind | None = None
    module_class: str | None = None
    aten_ops: tuple[str, ...] = ()
    shapes: tuple[Any, ...] | None = None
    dim: str | None = None
    dim_role: str | None = None
    dim_value: int | None = None
    layout: Layout | None = None
    dtype: str | None = None
    optimizer: str | None = None
    optimizer_impl: OptimizerImpl | None = None
    fix_params: dict[str, Any] = field(default_factory=dict)
    facts: dict[str, Any] = field(default_factory=dict)
    bound_ns: float = NAN

    def codes(self) -> dict[str, Any]:
        """The record's codes, by the names of
        :data:`~torch_nsight.vocabulary.FINDING_CODE_COLUMNS` (``aten_ops`` joined as the
        kernel table writes them)."""
        return {"cause": self.cause, "module_kind": self.module_kind,
                "module_class": self.module_class,
                "aten_ops": ", ".join(self.aten_ops) or None, "shapes": plain(self.shapes),
                "dim": self.dim, "dim_role": self.dim_role, "dim_value": plain(self.dim_value),
                "layout": self.layout, "dtype": self.dtype, "optimizer": self.optimizer,
                "optimizer_impl": self.optimizer_impl, "fix_code": self.fix_code,
                "fix_params": plain(self.fix_params), "facts": plain(self.facts)}
