"""The channels-last switch timed on this GPU, for ``findings --benchmark``: the step's own
convolutions and batch norms, NCHW then channels-last, on fresh tensors with the calls
table's shapes and dtypes (forward, and backward where the step ran one).

Why: the profile's own figure for ``channels_last`` counts what the NCHW kernels cost, times
a share calibrated on one model (``nchw_kernels``), or the conversions the switch removes
(``layout_conversion``). What cuDNN's and PyTorch's channels-last kernels cost instead for
grouped, depthwise or small-channel convolutions and batch norms, no share knows: on an
H200 (2026-11-28, ``bench/channels_last_ops.py``) DeepLabV3's calls summed to 1.6 ms
*slower* in channels-last, where the profile said 3.8 ms faster and its step, switched,
went 3.0-3.8 ms slower.

Every call is given to the first channels-last row, in rank order, that counts it (a row's
site: its module and everything under it; ``nchw_kernels`` rows count only their kind,
batch norms or depthwise convolutions), and the calls no row counts to the first row
without a kind (else the first row), so the rows add up to every convolution and batch
norm of the step (kernel time: ``--verify`` times the whole step). A row left without calls
gets a gain of 0 and no before or after (its calls' time is in the row that counts them,
before it). Each row's ``before_ns``/``after_ns`` are its calls' totals per run,
``untimed_calls`` the calls that could not be rebuilt or run (a transposed convolution, a
shape that does not fit), left out of both, and ``est_gain_ns`` their
difference: negative where channels-last is slower. A convolution runs with the stride,
padding, dilation and groups its call recorded (``op_args``); a calls table recorded before
2026-11-28 has none, and then stride and padding come from the output's shape, groups from
the weight and dilation is 1. Not timed: the elementwise kernels between the calls, which
move little with the layout.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from torch_nsight.vocabulary import LABELS, PATH_SEP

if TYPE_CHECKING:
    import pandas as pd

logger = logging.getLogger(__name__)

#: The calls table's op names (the ``aten::`` namespace dropped) that the layout changes.
CONVOLUTIONS = frozenset({"convolution", "_convolution", "conv2d"})
BATCH_NORMS = frozenset({"native_batch_norm", "cudnn_batch_norm", "_native_batch_norm_legit",
                         "batch_norm"})
#: The backward ops whose presence in the same variant and shape says the step trains.
BACKWARDS = {"conv": ("convolution_backward",),
             "batch_norm": ("native_batch_norm_backward", "cudnn_batch_norm_backward",
                            "batch_norm_backward")}
#: The causes of ``nchw_kernels`` rows, each counting only calls of its own kind.
KIND_CAUSES = ("batch_norm", "depthwise")
#: The channels of an input taken for the images themselves: no gradient flows back to them.
IMAGE_CHANNELS = 3
#: What times one callable on the GPU: its ns per call.
Timer = Callable[[Callable[[], Any]], float]


def matching(values: pd.Series, value: Any) -> pd.Series:
    """Where ``values`` is ``value``, a missing ``value`` (None or NaN) matching the missing
    ones (a variant or shape label)."""
    import pandas as pd

    return values.isna() if pd.isna(value) else values.eq(value)


def layout_calls(calls: pd.DataFrame, variant: Any, shape: Any) -> pd.DataFrame:
    """The 2-D convolution and batch-norm calls of one variant and shape, with ``kind``
    (``conv`` or ``batch_norm``) and ``backward`` (the step ran that kind's backward).

    Before (the calls table)::

        module_path  aten_op            input_shapes                count ...
        M/conv1      convolution        ((8, 3, 64, 64), (16, ...)) 1
        M/bn1        native_batch_norm  ((8, 16, 64, 64), (16,),..) 1
        M/conv1      convolution_backward ...                       1

    After: the first two rows, ``kind`` ``conv`` and ``batch_norm``, ``backward`` True and
    False (no ``native_batch_norm_backward`` row).
    """
    mine = calls[matching(calls["variant"], variant) & matching(calls["shape"], shape)]
    op = mine["aten_op"].astype(str).str.split("::").str[-1]
    kind = op.map(lambda name: "conv" if name in CONVOLUTIONS else
                  "batch_norm" if name in BATCH_NORMS else None)
    planar = mine["input_shapes"].map(lambda shapes: len(shapes) > 0 and len(shapes[0]) == 4)
    found = mine[kind.notna() & planar].assign(kind=kind)
    trains = {k: bool(op.isin(backward).any()) for k, backward in BACKWARDS.items()}
    return found.assign(backward=found["kind"].map(trains).astype(bool))


def _depthwise(call: Any) -> bool:
    shapes = call["input_shapes"]
    return call["kind"] == "conv" and len(shapes) > 1 and len(shapes[1]) == 4 and \
        int(shapes[1][1]) == 1 and int(shapes[0][1]) > 1


def _covers(site: str, cause: Any, call: Any) -> bool:
    """Whether a row of ``cause`` at ``site`` counts ``call``: under the site, and of the
    row's kind where it has one (``nchw_kernels``' ``batch_norm`` and ``depthwise``)."""
    path = str(call["module_path"])
    if not (path == site or path.startswith(site + PATH_SEP)):
        return False
    if cause == "batch_norm":
        return bool(call["kind"] == "batch_norm")
    return _depthwise(call) if cause == "depthwise" else True


def assign_calls(rows: pd.DataFrame, calls: pd.DataFrame) -> dict[Any, list[Any]]:
    """Each call's index given to one row's index: the first row (in ``rows``' order) that
    covers it (:func:`_covers`), else the first row without a kind (:data:`KIND_CAUSES`),
    else the first row."""
    given: dict[Any, list[Any]] = {index: [] for index in rows.index}
    if rows.empty:
        return given
    causes = rows["cause"] if "cause" in rows else [None] * len(rows)
    sites = list(zip(rows.index, rows["module_path"].astype(str), causes, strict=True))
    rest = next((row for row, _, cause in sites if cause not in KIND_CAUSES), sites[0][0])
    for index, call in calls.iterrows():
        owner = next((row for row, site, cause in sites if _covers(site, cause, call)), rest)
        given[owner].append(index)
    return given


def _conv_args(call: Any) -> tuple[tuple[int, ...], tuple[int, ...], dict[str, Any]]:
    """Input and weight shapes and ``F.conv2d``'s keyword arguments: as the call recorded
    them (``op_args``), else stride and padding from the output's shape, groups from the
    weight's input channels and dilation 1."""
    x, w = (tuple(int(d) for d in s) for s in call["input_shapes"][:2])
    out = tuple(int(d) for d in call["output_shapes"][0])
    recorded = call.get("op_args")
    given = json.loads(recorded) if isinstance(recorded, str) else {}
    if given.get("transposed"):
        raise ValueError(f"a transposed convolution: {x}, {w} -> {out}")
    needed = ("stride", "padding", "dilation", "groups")
    if len(w) == 4 and all(k in given for k in needed):  # as it ran
        return x, w, {k: tuple(given[k]) if isinstance(given[k], list) else given[k]
                      for k in needed}
    if len(w) != 4 or out[2] > x[2] or out[3] > x[3] or x[1] % w[1]:
        raise ValueError(f"not a plain 2-D convolution: {x}, {w} -> {out}")
    stride = tuple(max(1, round(x[i] / out[i])) for i in (2, 3))
    padding = tuple(max(0, -(-((out[i] - 1) * stride[i - 2] + w[i] - x[i]) // 2))
                    for i in (2, 3))
    return x, w, {"stride": stride, "padding": padding, "groups": x[1] // w[1]}


def _runner(call: Any, layout: Any) -> Callable[[], Any]:
    """One call, forward (and backward where the step ran it), on fresh tensors in
    ``layout``."""
    import torch
    from torch.nn import functional as F

    dtypes = [getattr(torch, str(d)) for d in call["input_dtypes"]]
    grad = bool(call["backward"])

    def tensor(shape: tuple[int, ...], dtype: Any, needs_grad: bool = grad) -> Any:
        made = torch.randn(shape, device="cuda", dtype=dtype)
        made = made.to(memory_format=layout) if len(shape) == 4 else made
        return made.requires_grad_(needs_grad)

    if call["kind"] == "conv":
        x_shape, w_shape, kwargs = _conv_args(call)
        x = tensor(x_shape, dtypes[0], grad and x_shape[1] != IMAGE_CHANNELS)
        w = tensor(w_shape, dtypes[1])

        def forward() -> Any:
            return F.conv2d(x, w, **kwargs)
    else:
        x_shape = tuple(int(d) for d in call["input_shapes"][0])
        channels = x_shape[1]
        x = tensor(x_shape, dtypes[0])
        weight = tensor((channels,), dtypes[1] if len(dtypes) > 1 else torch.float32)
        bias = tensor((channels,), weight.dtype)
        mean = torch.zeros(channels, device="cuda", dtype=weight.dtype)
        var = torch.ones(channels, device="cuda", dtype=weight.dtype)

        def forward() -> Any:  # batch statistics where the step trained, else running ones
            return F.batch_norm(x, mean, var, weight, bias, training=grad)

    if not grad:
        return forward
    leaves = ([t for t in (x, w) if t.requires_grad] if call["kind"] == "conv"
              else [x, weight, bias])
    upstream = torch.ones_like(forward())

    def forward_backward() -> None:  # gradients returned, not added up in .grad
        torch.autograd.grad(forward(), leaves, upstream)
    return forward_backward


def time_call(call: Any, timer: Timer) -> tuple[float, float]:
    """ns per call, NCHW then channels-last."""
    import torch

    return (timer(_runner(call, torch.contiguous_format)),
            timer(_runner(call, torch.channels_last)))


def _signature(call: Any) -> tuple[Any, ...]:
    """What makes two calls the same to time."""
    return (call["kind"], tuple(call["input_shapes"]), tuple(call["input_dtypes"]),
            tuple(call["output_shapes"]), bool(call["backward"]), call.get("op_args"))


def _time_distinct(calls: list[Any], timer: Timer,
                   timed: Callable[[Any, Timer], tuple[float, float]]
                   ) -> dict[tuple[Any, ...], tuple[float, float]]:
    """Each distinct call timed once in both layouts, with a progress bar where standard
    error is a terminal; a call that cannot be rebuilt or run gets (NaN, NaN), with a
    warning."""
    import sys

    from tqdm.auto import tqdm

    distinct = {_signature(call): call for call in calls}
    seen: dict[tuple[Any, ...], tuple[float, float]] = {}
    for key, call in tqdm(distinct.items(), desc="torch_nsight benchmark", unit="call",
                          file=sys.stderr, disable=None, leave=False):
        try:
            seen[key] = timed(call, timer)
        except (ValueError, TypeError, RuntimeError) as err:
            logger.warning("could not time %s in %s in both layouts: %s", call["aten_op"],
                           call["module_path"], err)
            seen[key] = (math.nan, math.nan)
    return seen


def benchmark_channels_last(found: pd.DataFrame, calls: pd.DataFrame, timer: Timer,
                            timed: Callable[[Any, Timer], tuple[float, float]] = time_call
                            ) -> pd.DataFrame:
    """Set the channels-last rows' ``before_ns``, ``after_ns``, ``est_gain_ns``,
    ``untimed_calls``, ``gain_basis`` (``measured``) and ``benchmarked`` from their calls
    timed in both layouts, one variant and shape at a time (see the module's docstring).
    Rows of a variant and shape without such calls are left as they are, and so are the rows
    of a 3-D convolution's switch (``fix_params["ndim"]`` 5: its 5-D calls are not timed).
    ``timed`` times one call (tests give their own).

    Returns:
        ``found``, changed in place.
    """
    # 2-D only: a Conv3d's rows (``channels_last_3d``) keep the profile's figure
    params = found["fix_params"] if "fix_params" in found else [None] * len(found)
    switch = found[[code == "channels_last" and not (isinstance(p, dict) and p.get("ndim") == 5)
                    for code, p in zip(found["fix_code"], params, strict=True)]]
    owned: list[tuple[Any, pd.DataFrame]] = []  # (row, its calls), rows in rank order
    for labels, rows in switch.groupby(list(LABELS), dropna=False, sort=False):
        mine = layout_calls(calls, *labels)
        if not mine.empty:
            owned += [(row, mine.loc[ix]) for row, ix in assign_calls(rows, mine).items()]
    seen = _time_distinct([call for _, mine in owned for _, call in mine.iterrows()],
                          timer, timed)
    for row, mine in owned:
        if mine.empty:  # its calls are counted by a row before it: its time is in that one's
            found.loc[row, ["before_ns", "after_ns", "est_gain_ns"]] = [math.nan, math.nan, 0.0]
            found.loc[row, ["gain_basis", "benchmarked"]] = ["measured", True]
            continue
        pairs = [seen[_signature(call)] for _, call in mine.iterrows()]
        timed_pairs = [(pair, float(count)) for pair, count in zip(pairs, mine["count"],
                                                                     strict=True)
                       if not math.isnan(pair[0])]
        before = sum(pair[0] * count for pair, count in timed_pairs)
        after = sum(pair[1] * count for pair, count in timed_pairs)
        found.loc[row, ["before_ns", "after_ns", "est_gain_ns"]] = [before, after,
                                                                     before - after]
        found.loc[row, "untimed_calls"] = len(pairs) - len(timed_pairs)
        found.loc[row, "gain_basis"] = "measured"
        found.loc[row, "benchmarked"] = True
    return found
