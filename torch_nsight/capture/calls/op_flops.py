"""FLOPs of one op call, as ``torch.utils.flop_counter`` counts them, with its one known
overcount corrected: the calls table (eager) and the compiled kernel maps both count here.

torch's ``convolution_backward`` formula counts a grouped (depthwise) convolution's weight
gradient as if every input channel met every output channel: ``groups`` times too many
(97x the forward on a depthwise 7x7 over 96 channels, 768x at 768), which put ConvNeXt's
backward kernels far above their roof. Its weight gradient does one multiply-add per forward
one; its input gradient is torch's own count. An op the registry has no formula for is
counted by its shapes where :mod:`torch_nsight.shape_flops` knows it (the grouped GEMM, cuDNN's
recurrent layers).
"""

from __future__ import annotations

from typing import Any

from torch_nsight.shape_flops import shape_flops


def _is_grouped_conv_backward(packet: Any, args: Any) -> bool:
    return (getattr(packet, "__name__", "") == "convolution_backward"
            and len(args) >= 11 and isinstance(args[9], int) and args[9] > 1)


def _grouped_conv_backward_flops(args: Any) -> int:
    from torch.utils.flop_counter import conv_flop_count

    grad_out, x, w, transposed, mask = args[0], args[1], args[2], args[7], args[10]
    shapes = [list(t.shape) for t in (grad_out, x, w)]
    flops = conv_flop_count(shapes[0], shapes[2], shapes[1], not transposed) if mask[0] else 0
    if mask[1]:
        flops += conv_flop_count(shapes[1], shapes[2], shapes[0], transposed)
    return int(flops)


def op_flops(packet: Any, args: Any, kwargs: Any, out: Any) -> int | None:
    """FLOPs of one call of ``packet`` (an op overload packet) on ``args``/``kwargs`` giving
    ``out``; None for an op torch's registry has no formula for.

    Raises:
        Exception: whatever a formula raises on arguments it does not cover (symbolic sizes,
            an overload's other signature): callers record no count rather than a wrong one.
    """
    from torch.utils.flop_counter import flop_registry

    formula = flop_registry.get(packet)
    if formula is None:
        shapes = [list(t.shape) for a in args  # a list argument's tensors in its place
                  for t in (a if isinstance(a, (list, tuple)) else (a,)) if hasattr(t, "shape")]
        counted = shape_flops(getattr(packet, "__name__", ""), shapes)
        return None if counted is None else int(counted)  # (a symbolic size made concrete)
    if _is_grouped_conv_backward(packet, args):
        return _grouped_conv_backward_flops(args)
    # As FlopCounterMode._count_flops calls the registered (shape-wrapped) formulas.
    return int(formula(*args, **kwargs, out_val=out))
