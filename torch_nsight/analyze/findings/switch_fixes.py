"""The findings whose fix is a switch, and that switch: what ``torch-nsight profile --verify``
applies in the user's script (:mod:`torch_nsight.capture.switches`) to measure the fix on
the user's own steps.

One line per finding kind, from the module the finding names (its target: the innermost
module of ``module_path``; a folded row's ``{0-7}`` becomes ``*``, every block). Findings
whose fix is a code change (an RMSNorm written out, pinned memory, a larger batch) have no
line; nor do Nsight Compute's rules.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from torch_nsight.analyze.findings.gemm_misaligned import PAD_TO
from torch_nsight.analyze.findings.wording import FIX
from torch_nsight.switches import FixSpec
from torch_nsight.vocabulary import PATH_SEP, UNATTRIBUTED, path_leaf

__all__ = ["FUSED_OP_SWITCHES", "SWITCH_FIXES", "fix_target", "switch_fix"]

_REDUCE_OVERHEAD = {"mode": "reduce-overhead"}
#: Finding kind -> its switch, from the target module's name (``""``: the whole model).
SWITCH_FIXES: dict[str, Callable[[str], FixSpec]] = {
    # the Linear's output features padded to the multiple the finding's fix names
    "gemm_misaligned": lambda target: FixSpec("pad_linear", target, {"multiple": PAD_TO}),
    # TF32 tensor cores for matmuls and convolutions: the whole process
    "fp32_no_tensor_cores": lambda target: FixSpec("tf32"),
    # one kernel for the chain: torch.compile of the module it ran in
    "elementwise_chain": lambda target: FixSpec("compile", target),
    # channels-last model and inputs: conversions anywhere in the model go
    "layout_conversion": lambda target: FixSpec("channels_last"),
    # fused with its neighbours by torch.compile
    "small_grid": lambda target: FixSpec("compile", target),
    # timeline: the step in CUDA graphs
    "launch_bound": lambda target: FixSpec("compile", "", _REDUCE_OVERHEAD),
    "small_kernels": lambda target: FixSpec("compile", target, _REDUCE_OVERHEAD),
}

#: An elementwise chain whose fix names one fused op (its ``fix`` text): that op as the switch,
#: so that what is measured is what the finding advises, not a compile of the module; None:
#: no switch (an optimizer's fused step is set where the user's script makes the optimizer,
#: and a compile of the model would measure something else).
FUSED_OP_SWITCHES: dict[str, Callable[[str], FixSpec] | None] = {
    FIX["chain_gelu"]: lambda target: FixSpec("gelu_tanh", target),
    FIX["chain_optimizer"]: None,
}


def fix_target(module_path: object) -> str:
    """The module name a fix targets: the innermost module of ``module_path``, a folded
    index kept (``h.{0-11}.mlp``, ``h.{0,2,5}.mlp``: the blocks it names, matched by
    :func:`~torch_nsight.switches.target_matches`); ``""`` (the whole model) for the root,
    a missing or unattributed path."""
    if not isinstance(module_path, str) or module_path == UNATTRIBUTED \
            or PATH_SEP not in module_path:
        return ""
    return path_leaf(module_path)


def switch_fix(finding: Mapping[str, Any]) -> FixSpec | None:
    """The switch that applies a finding row's fix, or None when it has none."""
    fix, kind = str(finding.get("fix")), str(finding.get("finding"))
    make = (FUSED_OP_SWITCHES[fix] if kind == "elementwise_chain" and fix in FUSED_OP_SWITCHES
            else SWITCH_FIXES.get(kind))
    return None if make is None else make(fix_target(finding.get("module_path")))
