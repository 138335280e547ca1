"""What limits a latency-bound kernel, from its launch alone (render words it in the reason).

A kernel that keeps neither its SMs nor its memory busy (``bound == "latency"``) is most
often starved of parallel work. The launch already says whether it is: the rule
(:func:`launch_limiter`) reads the waves (``launch__waves_per_multiprocessor``: the grid in
units of what all SMs hold at once) and the theoretical occupancy of
:mod:`~torch_nsight.analyze.occupancy`, in this order:

* ``one_block``: a grid of one block that lasts :data:`ONE_BLOCK_NS` or more, on one SM
  whatever the GPU: the op's own serial work (NMS's ``gather_keep_from_mask``), which a
  larger batch does not spread (a shorter one is a small op whose grid grows with its
  input: a batch norm's running statistics over C elements, a loss's mean; ``small_grid``);
* ``small_grid``: under one wave (``waves < 1``): some SMs idle, or all under-filled;
* ``registers``, ``shared_memory``, ``block_size``, ``blocks_per_sm``: theoretical occupancy
  at most :data:`LOW_OCCUPANCY_PCT`, named by the resource that sets it;
* ``tail``: a partial last wave that leaves the SMs idle for at least :data:`TAIL_PCT` of
  the kernel's time (blocks of equal duration assumed);
* the occupancy limiter again, for any theoretical occupancy under 100% (as Nsight
  Compute's Occupancy section names it);
* None: the launch is not the limit (full occupancy, whole waves), or an input is unknown.

:func:`add_limiter` stores the verdict (``limiter``); render adds its numbers to the reason
of latency-bound rows (:mod:`torch_nsight.render.reason_words`): ``0.4 waves: 53 blocks on 132 SMs``, ``occupancy 19%: 168 registers
per thread``, or, where the launch is not the limit, ``launch not the limit: occupancy
100%, 5.8 waves`` (what limits such a kernel, memory latency or instruction issue, takes
Nsight Compute's WarpStateStats section to tell); docs/roofline.md lists every form. The
hotspot's ``next_step`` turns the verdict into a PyTorch-level fix
(:func:`torch_nsight.analyze.hotspots.next_step_code`, worded by render).

Where the row also holds its scheduler's figures or its warp states (the fast set, the
focused pass of ``profile --stalls``: :mod:`~torch_nsight.analyze.stalls`),
:func:`latency_cause` names one cause instead, the first that holds:

* ``launch_overhead``: the launch lasts under ``LAUNCH_OVERHEAD_NS`` (5 µs);
* ``one_block``, ``small_grid``: as above;
* the occupancy resource: theoretical occupancy at most :data:`LOW_OCCUPANCY_PCT` and under
  ``FEW_ELIGIBLE`` (1) eligible warp per scheduler: too few warps to hide latency;
* ``tail``: as above;
* ``memory_latency``, ``synchronization``, ``instruction_issue``, ``shared_memory_access``:
  one stall group (``STALL_GROUPS``) holds ``DOMINANT_STALL_PCT`` (40%) of the stalls;
* ``few_warps``: achieved occupancy under half the theoretical one;
* ``instruction_issue``: the schedulers issue on half their cycles or more;
* ``waiting_warps``: without stall reasons (the fast set holds the scheduler's figures
  alone), under ``FEW_ELIGIBLE`` eligible warp per scheduler: the warps are there and wait,
  on memory or a dependency (which one takes the stall reasons of ``--stalls``);
* the occupancy resource (any occupancy under 100%), else None;

The fast set collects achieved occupancy and the eligible and issued warps per scheduler
in its one replay pass, so every latency-bound kernel of a fast profile gets this verdict;
the focused pass adds the stall reasons that split ``waiting_warps`` into memory latency,
synchronization, instruction issue or shared memory. Its clause ends with the evidence: ``long scoreboard 62% of stalls: waits on global
memory; achieved occupancy 31% of 50% theoretical; 1.9 eligible warps per scheduler``.
"""

from __future__ import annotations

import math
from typing import Literal, get_args

import pandas as pd

from torch_nsight.analyze.classify import SMALL_GRID
from torch_nsight.analyze.frames import own
from torch_nsight.analyze.occupancy import as_number as _number
from torch_nsight.analyze.stalls import (
    FEW_ELIGIBLE,
    GROUP_CAUSE,
    ISSUE_BUSY,
    LAUNCH_OVERHEAD_NS,
    LOW_ACHIEVED_RATIO,
    CauseKind,
    achieved_ratio,
    dominant_group,
    has_scheduler,
    has_stalls,
)
from torch_nsight.metrics import STALL_REASONS, stall_column

LimiterKind = Literal["one_block", "small_grid", "registers", "shared_memory", "block_size",
                      "blocks_per_sm", "tail"]
#: Every verdict :func:`add_limiter` stores (``limiter``).
LIMITER_CODES = frozenset((*get_args(LimiterKind), *get_args(CauseKind)))
#: A grid of one block lasting this long (ten launches' time) iterates over its input in that
#: block: an elementwise op or a reduction small enough for one block is done in a few µs.
ONE_BLOCK_NS = 10 * LAUNCH_OVERHEAD_NS
#: Occupancy (% of the SM's warps) at or under which the resource that sets it is named.
LOW_OCCUPANCY_PCT = 50.0
#: A partial last wave is named when it can leave the SMs idle this share (%) of the time.
TAIL_PCT = 25.0
_RESOURCES = ("registers", "shared_memory", "block_size", "blocks_per_sm")
#: The columns the verdict and its words read (a kernel row's; absent ones unknown).
LIMITER_INPUTS = ("bound", "basis", "sol_bottleneck", "sm_pct", "mem_pct", "waves",
                  "grid_size", "block_size", "sm_count", "blocks_per_sm", "occupancy_pct",
                  "occupancy_limiter", "registers_per_thread", "shared_static_bytes",
                  "shared_dynamic_bytes", "sm_blocks", "duration_ns", "achieved_occupancy_pct",
                  "eligible_warps_per_scheduler", "issued_warps_per_scheduler",
                  *(stall_column(r) for r in STALL_REASONS))
#: The codes and numbers a kernel's reason is worded from (render's
#: :func:`~torch_nsight.render.reason_words.reason_words`): classify's verdict with its
#: numbers (the SOL percentages or the fast set's stand-ins, the DRAM roofline's position),
#: then, on latency-bound rows alone, the limiter with its numbers.
VERDICT_INPUTS = ("reason_code", "bound", "basis", "sol_bottleneck", "sm_pct", "mem_pct",
                  "waves", "roofline_side", "pct_of_roof", "precision", "sm_issue_pct",
                  "tensor_pipe_pct", "dram_busy_pct", "l1_lsu_pct")
REASON_INPUTS = tuple(dict.fromkeys((*VERDICT_INPUTS, "limiter", *LIMITER_INPUTS)))


def tail_idle_pct(waves: float) -> float:
    """The share (%) of a kernel's time its SMs may idle in a partial last wave: the last
    wave lasts as long as a full one with ``waves - floor(waves)`` of it filled; 0 for whole
    waves or under one wave; NaN when unknown."""
    if math.isnan(waves) or waves < 1:
        return 0.0 if waves == waves else math.nan
    whole = math.ceil(waves - 1e-9)
    return 100.0 * (whole - waves) / whole


def small_grid_title(row: dict[str, object]) -> bool:
    """Whether the kernel's bound was Nsight Compute's ``Small Grid`` verdict (the stored rule
    title, or the rule re-applied to the SOL percentages or their stand-ins, which gives it
    under one wave): the verdict :mod:`~torch_nsight.analyze.classify` words with the waves.

    Args:
        row: a classified kernel row (``basis``, ``sol_bottleneck``, ``waves``).
    """
    basis = row.get("basis")
    if basis == "ncu_rule":  # without the percentages classify says the title alone
        return row.get("sol_bottleneck") == SMALL_GRID and not any(
            math.isnan(_number(row.get(c))) for c in ("sm_pct", "mem_pct", "waves"))
    return basis in ("sol_pct", "sol_estimate") and row.get("bound") == "latency" \
        and _number(row.get("waves")) < 1


def launch_limiter(row: dict[str, object]) -> LimiterKind | None:
    """The verdict for one kernel row (see the module docstring), whatever its bound.

    Args:
        row: a kernel row with ``waves``, ``occupancy_pct`` and ``occupancy_limiter``.

    Returns:
        The limiter, or None when the launch is not the limit or is unknown.
    """
    if _number(row.get("grid_size")) == 1 and _number(row.get("duration_ns")) >= ONE_BLOCK_NS:
        return "one_block"
    waves = _number(row.get("waves"))
    if waves < 1:
        return "small_grid"
    occupancy = _number(row.get("occupancy_pct"))
    limiter = row.get("occupancy_limiter")
    if not isinstance(limiter, str):
        limiter = None
    if limiter is not None and occupancy <= LOW_OCCUPANCY_PCT:
        return limiter  # type: ignore[return-value]
    if tail_idle_pct(waves) >= TAIL_PCT:
        return "tail"
    return limiter  # type: ignore[return-value]


def latency_cause(row: dict[str, object],
                  launch: LimiterKind | None) -> LimiterKind | CauseKind | None:
    """The cause of one latency-bound kernel with warp-state columns (the module docstring's
    list, first match).

    Args:
        row: a kernel row with the stall, scheduler and occupancy columns.
        launch: :func:`launch_limiter`'s verdict on its launch.

    Returns:
        The cause, or None when no single cause stands out.
    """
    if _number(row.get("duration_ns")) < LAUNCH_OVERHEAD_NS:
        return "launch_overhead"
    if launch in ("one_block", "small_grid"):
        return launch
    eligible = _number(row.get("eligible_warps_per_scheduler"))
    occupancy = _number(row.get("occupancy_pct"))
    if launch in _RESOURCES and occupancy <= LOW_OCCUPANCY_PCT and not eligible >= FEW_ELIGIBLE:
        return launch
    if tail_idle_pct(_number(row.get("waves"))) >= TAIL_PCT:
        return "tail"
    group = dominant_group(row)
    if group is not None:
        return GROUP_CAUSE[group]
    if achieved_ratio(row) < LOW_ACHIEVED_RATIO:
        return "few_warps"
    if _number(row.get("issued_warps_per_scheduler")) >= ISSUE_BUSY:
        return "instruction_issue"
    if not has_stalls(row) and eligible < FEW_ELIGIBLE:
        return "waiting_warps"
    return launch if launch in _RESOURCES else None


def add_limiter(df: pd.DataFrame) -> pd.DataFrame:
    """Add ``limiter`` to latency-bound rows (render words it, with the row's numbers, into
    the ``reason``: :mod:`torch_nsight.render.reason_words`).

    Args:
        df: a classified kernel table with the columns of
            :func:`~torch_nsight.analyze.occupancy.add_occupancy` (rows without them, or
            without ``waves``, get no limiter).

    Returns:
        A copy with ``limiter`` (None on other rows).
    """
    out = own(df)
    limiters: list[object] = [None] * len(out)
    if "bound" in out:
        latency = [at for at, bound in enumerate(out["bound"].tolist()) if bound == "latency"]
        rows = out[[c for c in LIMITER_INPUTS if c in out]].iloc[latency].to_dict("records")
        for at, row in zip(latency, rows, strict=True):  # the latency-bound rows alone
            kind: LimiterKind | CauseKind | None = launch_limiter(row)
            if has_stalls(row) or has_scheduler(row):
                kind = latency_cause(row, kind)  # type: ignore[arg-type]
            limiters[at] = kind
    out["limiter"] = pd.Series(limiters, index=out.index, dtype=object)
    return out
