"""Theoretical occupancy per kernel, and the resource that limits it (numbers only).

Computed from the launch configuration every Nsight Compute report holds (block size,
registers per thread, shared memory per block: recorded at launch, no replay pass) and the
device's per-SM limits, as CUDA's occupancy calculator does (``cuda_occupancy.h``,
``cudaOccMaxActiveBlocksPerMultiprocessor``): the blocks one SM can hold is the smallest of

* registers: ``regs x 32`` rounded up to the allocation unit (256) per warp, allocated in
  each of the SM's 4 sub-partitions: ``floor(registers_per_SM / 4 / per_warp) x 4`` warps;
* shared memory: ``static + dynamic + reserved`` (the 1 KB the runtime keeps per block)
  rounded up to 128 bytes, into the shared memory configured for the launch (the carveout,
  ``launch__shared_mem_config_size``; the device's maximum where not recorded);
* warps (the block size): ``floor(warps_per_SM / warps_per_block)``;
* blocks: the device's cap on resident blocks per SM.

Occupancy is ``blocks x warps_per_block / warps_per_SM``. The device limits come from the
report's ``device__attribute_*`` values; where a source lacks them (a profile saved before
they were read) they come from :data:`KNOWN_SMS` by compute capability or GPU name; where
an input is still missing (shared memory per block, say) occupancy is NaN and the limiter
None: unknown, never guessed. tests/analyze/test_occupancy.py checks the result against
Nsight Compute's own ``sm__maximum_warps_per_active_cycle_pct`` and
``launch__occupancy_limit_*`` on every kernel of the recorded reports.

Table (columns added)::

    registers_per_thread  block_size  shared_*_bytes  sm_*  ->  blocks_per_sm  occupancy_pct  occupancy_limiter
    168                   384         ...                       1              18.75          registers
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal, get_args

import pandas as pd

from torch_nsight.analyze.devices import capability_of
from torch_nsight.analyze.frames import each_distinct, own

#: What limits occupancy, in the order ties are named: the hard caps first, as the driver
#: sizes the shared memory carveout to reach them (a 32-thread block of no shared memory
#: ties the 32-block cap with its 1 KB reserve in a 32 KB carveout).
OccupancyLimiter = Literal["block_size", "blocks_per_sm", "registers", "shared_memory"]
LIMITERS: tuple[OccupancyLimiter, ...] = get_args(OccupancyLimiter)

WARP_SIZE = 32
#: Registers are allocated per warp in units of 256 (compute capability 5.0 to 9.x/10.x).
REGISTER_UNIT = 256
#: An SM's register file is split between this many sub-partitions (warp schedulers).
SUB_PARTITIONS = 4
#: Shared memory is allocated per block in units of 128 bytes.
SHARED_UNIT = 128
#: Shared memory the CUDA runtime reserves per block (compute capability 8.0 and later);
#: reports give it as ``launch__shared_mem_per_block_driver``.
RESERVED_SHARED = 1024


@dataclass(frozen=True)
class SmLimits:
    """Per-SM limits of one architecture."""

    registers: int
    shared_bytes: int
    warps: int
    blocks: int


#: Per-SM limits by compute capability, from the CUDA C++ Programming Guide's "Technical
#: Specifications per Compute Capability" table (the H200's recorded device attributes read
#: the same for 9.0: 65536 registers, 233472 bytes = 228 KB of shared memory, 64 warps, 32
#: blocks). Used only where a source lacks the device attributes.
KNOWN_SMS: dict[tuple[int, int], SmLimits] = {
    (8, 0): SmLimits(65536, 167936, 64, 32),   # A100
    (8, 6): SmLimits(65536, 102400, 48, 16),
    (8, 9): SmLimits(65536, 102400, 48, 24),   # L4, L40
    (9, 0): SmLimits(65536, 233472, 64, 32),   # H100, H200
    (10, 0): SmLimits(65536, 233472, 64, 32),  # B200
}

def as_number(value: object) -> float:
    """``value`` as a float; NaN for None or anything that is not a number."""
    try:
        return float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return math.nan


_number = as_number


def sm_limits(row: dict[str, object]) -> SmLimits | None:
    """The per-SM limits of a kernel row's device: its attributes, else :data:`KNOWN_SMS`."""
    recorded = [_number(row.get(c)) for c in ("sm_registers", "sm_shared_bytes", "sm_warps",
                                              "sm_blocks")]
    if not any(math.isnan(v) or v <= 0 for v in recorded):
        return SmLimits(*(int(v) for v in recorded))
    major, minor = _number(row.get("compute_major")), _number(row.get("compute_minor"))
    if not (math.isnan(major) or math.isnan(minor)):
        return KNOWN_SMS.get((int(major), int(minor)))
    capability = capability_of(row.get("gpu"))
    return None if capability is None else KNOWN_SMS.get(capability)


def _round_up(value: float, unit: int) -> float:
    return math.ceil(value / unit) * unit


def block_limits(block_size: float, registers_per_thread: float, shared_per_block: float,
                 shared_per_sm: float, sm: SmLimits) -> dict[OccupancyLimiter, float]:
    """Blocks one SM can hold, per resource (cuda_occupancy.h; see the module docstring).

    Args:
        block_size: threads per block.
        registers_per_thread: registers per thread (0: none).
        shared_per_block: shared memory per block in bytes, the reserved part included.
        shared_per_sm: shared memory configured per SM for the launch, in bytes.
        sm: the device's per-SM limits.

    Returns:
        :data:`LIMITERS` -> blocks per SM (``inf`` where the resource sets no limit); NaN
        where an input is missing.
    """
    warps_per_block = math.ceil(block_size / WARP_SIZE)
    per_warp = _round_up(registers_per_thread * WARP_SIZE, REGISTER_UNIT)
    shared = _round_up(shared_per_block, SHARED_UNIT)
    by_registers = (math.inf if per_warp == 0 else
                    (sm.registers // SUB_PARTITIONS // per_warp) * SUB_PARTITIONS
                    // warps_per_block)
    return {
        "block_size": sm.warps // warps_per_block,
        "blocks_per_sm": sm.blocks,
        "registers": by_registers,
        "shared_memory": math.inf if shared == 0 else shared_per_sm // shared,
    }


def occupancy_of(row: dict[str, object]) -> tuple[float, float, OccupancyLimiter | None]:
    """Theoretical occupancy of one kernel row.

    Args:
        row: a kernel row with ``block_size``, ``registers_per_thread``, the
            ``shared_*_bytes`` columns and the device columns (or ``gpu``).

    Returns:
        (blocks per SM, occupancy in % of the SM's warps, the limiting resource: the first
        of :data:`LIMITERS` whose limit is the smallest, None at 100%); NaN, NaN, None when an
        input is unknown.
    """
    sm = sm_limits(row)
    block = _number(row.get("block_size"))
    registers = _number(row.get("registers_per_thread"))
    static, dynamic = (_number(row.get(c)) for c in ("shared_static_bytes",
                                                     "shared_dynamic_bytes"))
    if sm is None or any(math.isnan(v) for v in (block, registers, static, dynamic)) or block < 1:
        return math.nan, math.nan, None
    reserved = _number(row.get("shared_reserved_bytes"))
    configured = _number(row.get("shared_config_bytes"))
    limits = block_limits(block, registers, static + dynamic + (
        RESERVED_SHARED if math.isnan(reserved) else reserved),
        sm.shared_bytes if math.isnan(configured) or configured <= 0 else configured, sm)
    blocks = min(limits.values())
    pct = 100.0 * blocks * math.ceil(block / WARP_SIZE) / sm.warps
    limiter = None if pct >= 100.0 else next(k for k in LIMITERS if limits[k] == blocks)
    return float(blocks), pct, limiter


def add_occupancy(df: pd.DataFrame) -> pd.DataFrame:
    """Add ``blocks_per_sm``, ``occupancy_pct`` and ``occupancy_limiter`` (theoretical; see
    the module docstring); NaN/None where the source lacks an input.

    Args:
        df: a kernel table.

    Returns:
        A copy with the three columns.
    """
    out = own(df)
    columns = [c for c in ("block_size", "registers_per_thread", "shared_static_bytes",
                           "shared_dynamic_bytes", "shared_reserved_bytes",
                           "shared_config_bytes", "sm_registers", "sm_shared_bytes",
                           "sm_warps", "sm_blocks", "compute_major", "compute_minor", "gpu")
               if c in out]
    results = each_distinct(out[columns], occupancy_of)
    blocks, pct, limiter = zip(*results, strict=True) if results else ((), (), ())
    out["blocks_per_sm"] = pd.Series(blocks, index=out.index, dtype="float64")
    out["occupancy_pct"] = pd.Series(pct, index=out.index, dtype="float64")
    out["occupancy_limiter"] = pd.Series(limiter, index=out.index, dtype=object)
    return out
