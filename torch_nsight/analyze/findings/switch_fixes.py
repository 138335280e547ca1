"""The findings whose fix is a switch, and that switch: what ``torch-nsight profile --verify``
applies in the user's script (:mod:`torch_nsight.capture.fixes.switches`) to measure the fix on
the user's own steps.

One line per fix code (the finding's ``fix_code``), from the module the finding names (its
target: the innermost module of ``module_path``; a folded row's ``{0-7}`` names its blocks).
Fixes that are code changes (an RMSNorm written out, a wider Linear's callers, a fused
optimizer made where the script makes it, a larger batch) have no line: a switch must
measure the fix the finding gives, not something near it (a compile of the whole model for
an optimizer's step measured the model's compile).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from torch_nsight.analyze.findings.gemm_misaligned import PAD_TO
from torch_nsight.verify_exchange import FixSpec
from torch_nsight.vocabulary import PATH_SEP, UNATTRIBUTED, path_leaf

__all__ = ["SWITCH_FIXES", "TIMELINE_SWITCHES", "fix_target", "switch_fix"]

_REDUCE_OVERHEAD = {"mode": "reduce-overhead"}
#: Fix code -> its switch, from the target module's name (``""``: the whole model).
SWITCH_FIXES: dict[str, Callable[[str], FixSpec]] = {
    # the Linear's output features padded to the multiple the finding's fix names
    "pad_features": lambda target: FixSpec("pad_linear", target, {"multiple": PAD_TO}),
    # TF32 tensor cores for matmuls and convolutions: the whole process
    "tf32_matmul": lambda target: FixSpec("tf32"),
    "tf32_conv": lambda target: FixSpec("tf32"),
    # the grouped GEMMs autocast leaves in fp32, cast in the module that calls them
    "cast_to_half": lambda target: FixSpec("cast", target),
    # one kernel for the chain: torch.compile of the module it ran in
    "compile_module": lambda target: FixSpec("compile", target),
    # the fix says compile the model (the module alone would cost more than it saves): the
    # whole model compiled, which is the fix given, not something near it
    "compile_model": lambda target: FixSpec("compile", ""),
    # the tanh GELU as one op: the fused op the finding names, not a compile of the module
    "use_gelu_tanh": lambda target: FixSpec("gelu_tanh", target),
    # channels-last model and inputs: conversions anywhere in the model go
    "channels_last": lambda target: FixSpec("channels_last"),
    # a launch of a few µs: the module in CUDA graphs
    "cuda_graphs": lambda target: FixSpec("compile", target, _REDUCE_OVERHEAD),
    # cuDNN times its algorithms for the step's shapes: the whole process
    "cudnn_benchmark": lambda target: FixSpec("cudnn_benchmark"),
    # the optimizer's own class made with fused=True: its flag set before each step
    "optimizer_fused": lambda target: FixSpec("fused_optimizer"),
}
#: Fix code -> the finding's fix parameters its switch takes as options (the dtype a cast
#: was predicted for).
SWITCH_OPTIONS: dict[str, tuple[str, ...]] = {"cast_to_half": ("dtype",)}
#: A timeline finding (worded by the timeline's analysis, no fix code) -> its switch.
TIMELINE_SWITCHES: dict[str, Callable[[str], FixSpec]] = {
    "launch_bound": lambda target: FixSpec("compile", "", _REDUCE_OVERHEAD),
    "small_kernels": lambda target: FixSpec("compile", target, _REDUCE_OVERHEAD),
}


def fix_target(module_path: object) -> str:
    """The module name a fix targets: the innermost module of ``module_path``, a folded
    index kept (``h.{0-11}.mlp``, ``h.{0,2,5}.mlp``: the blocks it names, matched by
    :func:`~torch_nsight.verify_exchange.target_matches`); ``""`` (the whole model) for the root,
    a missing or unattributed path."""
    if not isinstance(module_path, str) or module_path == UNATTRIBUTED \
            or PATH_SEP not in module_path:
        return ""
    return path_leaf(module_path)


def switch_fix(finding: Mapping[str, Any]) -> FixSpec | None:
    """The switch that applies a finding row's fix (by its ``fix_code``; a timeline
    finding's by its ``finding``), or None when it has none."""
    code = finding.get("fix_code")
    make = (SWITCH_FIXES.get(code) if isinstance(code, str) and code
            else TIMELINE_SWITCHES.get(str(finding.get("finding"))))
    if make is None:
        return None
    spec = make(fix_target(finding.get("module_path")))
    params = finding.get("fix_params")
    given = {key: params[key] for key in SWITCH_OPTIONS.get(str(code), ())
             if isinstance(params, Mapping) and params.get(key) is not None}
    return FixSpec(spec.fix, spec.target, {**spec.options, **given}) if given else spec
