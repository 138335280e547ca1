"""Whether Dynamo or export is tracing: the capture stage then stands aside (a range
pushed from traced code would break the graph).

:func:`is_compiling` is asked on every instrumented module call, so its two checks are
also here apart (:data:`dynamo_compiling`, ``compile_flags._is_compiling_flag``) for the
forward wrapper to read inline.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

__all__ = ["is_compiling", "dynamo_compiling", "compile_flags"]


def _compiling_check() -> tuple[Callable[[], bool], Any]:
    """The cheapest check that Dynamo or export is tracing, as (function, flag holder).

    Dynamo reads ``torch.compiler.is_dynamo_compiling()`` as True while it traces; export
    sets ``torch.compiler._is_compiling_flag``. ``torch.compiler.is_compiling()`` reads
    both, in two Python calls; every instrumented module call asks, so it is worth one.
    Before PyTorch 2.3 there is only ``torch._dynamo.is_compiling``.
    """
    compiler = torch.compiler
    dynamo_check = getattr(compiler, "is_dynamo_compiling", None)
    if dynamo_check is None or not hasattr(compiler, "_is_compiling_flag"):
        check = getattr(compiler, "is_compiling", None) or torch._dynamo.is_compiling
        return check, type("NoFlag", (), {"_is_compiling_flag": False})
    return dynamo_check, compiler


dynamo_compiling, compile_flags = _compiling_check()


def is_compiling() -> bool:
    """Whether Dynamo or export is tracing: the capture stage then stands aside."""
    return dynamo_compiling() or compile_flags._is_compiling_flag
