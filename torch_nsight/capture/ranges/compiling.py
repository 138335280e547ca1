"""Whether Dynamo or export is tracing: the capture stage then stands aside (a range
pushed from traced code would break the graph); and Dynamo's frame evaluation, which the
capture stage steps out of so that Dynamo compiles only the user's own frames.

:func:`is_compiling` is asked on every instrumented module call, so its two checks are
also here apart (:data:`dynamo_compiling`, ``compile_flags._is_compiling_flag``) for the
forward wrapper to read inline.

Under ``torch.compile`` Dynamo sees every Python frame that starts while its callback is
set (:func:`dynamo_callback`), compiles each frame it has not marked to skip, and traces the
functions that frame calls. An instrumented forward that runs eagerly there (the module
where compiling starts, or one called after a graph break) would be such a frame: the
wrapper's one code object compiled once per module and call signature, sharing one
recompile budget (``recompile_limit``), and the range machinery compiled behind it. So the
wrapper's frames are marked to skip (:func:`skip_frames`, this frame only: the frames it
calls are seen as usual), and the wrapper sets the callback aside while it opens its range
and sets it back only for the module's own forward (:func:`call_under_dynamo`): Dynamo then
compiles the frames it would compile without torch_nsight, no others.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import torch

__all__ = ["is_compiling", "dynamo_compiling", "compile_flags", "dynamo_callback",
           "set_dynamo_callback", "call_under_dynamo", "skip_frames"]

logger = logging.getLogger(__name__)


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


def _no_callback() -> None:
    return None


def _frame_evaluation() -> tuple[Callable[[], Any], Callable[[Any], Any], Any]:
    """(get, set, the C module) of Dynamo's frame-evaluation callback: what
    ``torch._dynamo.disable`` sets aside and restores. Without them (a torch that lacks
    them), a getter that says none is set."""
    try:
        from torch._C._dynamo import eval_frame
    except ImportError:
        return _no_callback, lambda callback: None, None
    get = getattr(eval_frame, "get_eval_frame_callback", None)
    set_ = getattr(eval_frame, "set_eval_frame", None)
    if get is None or set_ is None:
        return _no_callback, lambda callback: None, None
    return get, set_, eval_frame


dynamo_callback, set_dynamo_callback, _EVAL_FRAME = _frame_evaluation()
"""``dynamo_callback()``: Dynamo's callback for the frames that start on this thread now
(None when nothing is compiled here; read at run time, never while tracing);
``set_dynamo_callback(callback)`` sets it and returns the one it replaced."""


def call_under_dynamo(callback: Any, function: Callable[..., Any], module: Any,
                      *args: Any, **kwargs: Any) -> Any:
    """``function(module, *args, **kwargs)`` with Dynamo's ``callback`` set again (the
    module's own forward, compiled as it would be without torch_nsight); set aside again
    after it. Called with the callback set aside, so this frame is not compiled."""
    set_dynamo_callback(callback)
    try:
        return function(module, *args, **kwargs)
    finally:
        set_dynamo_callback(None)


def skip_frames(*functions: Callable[..., Any]) -> bool:
    """Have Dynamo run the frames of ``functions`` as they are, never compile them (the
    frames they call are compiled as usual: ``torch._dynamo.disable(recursive=False)`` of
    the code itself, so a traced call of them is still inlined).

    Returns:
        Whether this torch could mark them (False when it lacks the frame strategies).
    """
    eval_frame = _EVAL_FRAME
    set_strategy = getattr(eval_frame, "set_code_exec_strategy", None)
    strategy = getattr(eval_frame, "_FrameExecStrategy", None)
    action = getattr(eval_frame, "_FrameAction", None)
    if set_strategy is None or strategy is None or action is None:
        logger.debug("torch_nsight: this torch cannot mark frames for Dynamo to skip")
        return False
    for function in functions:
        set_strategy(function.__code__, strategy(action.SKIP, action.DEFAULT))
    return True
