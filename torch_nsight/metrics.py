"""The Nsight Compute metrics torch_nsight uses, declared once as data.

Each :class:`Metric` maps an ``ncu`` metric name to a column of the kernel table (snake_case,
unit in the name) and says which ``ncu`` section collects it, if any. The collect stage
builds its ``--metrics``/``--section`` arguments from :data:`METRIC_SETS`; the report stage
reads the same names back. Plain data: no torch, no pandas.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

MetricKind = Literal["counter", "percent", "busy", "peak", "clock", "launch", "device",
                     "scheduler", "warp_state"]


@dataclass(frozen=True)
class Metric:
    """One ncu metric and the kernel-table column it fills."""

    name: str
    column: str
    unit: str
    kind: MetricKind
    section: str | None = None
    description: str = ""


def _sass(op: str) -> str:
    return f"sm__sass_thread_inst_executed_op_{op}_pred_on.sum"


#: The warp stall reasons of Nsight Compute's WarpStateStats section, as the reasons of
#: ``smsp__average_warps_issue_stalled_<reason>_per_issue_active.ratio``: the cycles a warp
#: spends stalled for that reason per instruction issued (the section's "warp cycles per
#: issued instruction", split by reason). ``selected`` (the cycle it issues) is no stall.
STALL_REASONS: tuple[str, ...] = (
    "long_scoreboard", "short_scoreboard", "barrier", "membar", "mio_throttle",
    "math_pipe_throttle", "not_selected", "wait", "no_instruction", "lg_throttle",
    "tex_throttle", "branch_resolving", "dispatch_stall", "drain", "imc_miss", "misc",
    "sleeping", "gmma",
)


def stall_column(reason: str) -> str:
    """The kernel-table column of one stall reason: ``stall_long_scoreboard_per_issue``."""
    return f"stall_{reason}_per_issue"


def _stall(reason: str) -> Metric:
    return Metric(f"smsp__average_warps_issue_stalled_{reason}_per_issue_active.ratio",
                  stall_column(reason), "cycle/inst", "warp_state", "WarpStateStats",
                  f"warp cycles stalled on {reason.replace('_', ' ')} per issued instruction")


_TENSOR = "sm__ops_path_tensor"

METRICS: tuple[Metric, ...] = (
    # time and speed-of-light percentages
    Metric("gpu__time_duration.sum", "duration_ns", "ns", "counter", "SpeedOfLight",
           "GPU time of the kernel"),
    Metric("sm__throughput.avg.pct_of_peak_sustained_elapsed", "sm_pct", "%", "percent",
           "SpeedOfLight", "compute (SM) throughput, % of peak"),
    Metric("gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed", "mem_pct", "%",
           "percent", "SpeedOfLight", "memory throughput, % of peak"),
    # one-pass stand-ins for the two SOL percentages (the busiest units of each, measured on
    # real models on the H200: bench/bound_calibration.py, docs/roofline.md)
    Metric("sm__issue_active.avg.pct_of_peak_sustained_elapsed", "sm_issue_pct", "%", "busy",
           None, "cycles the SMs issued an instruction, % of peak"),
    Metric("sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed", "tensor_pipe_pct",
           "%", "busy", None, "cycles the tensor pipe was busy, % of peak"),
    Metric("dram__cycles_active.avg.pct_of_peak_sustained_elapsed", "dram_busy_pct", "%", "busy",
           None, "cycles DRAM was busy, % of peak"),
    Metric("l1tex__data_pipe_lsu_wavefronts.avg.pct_of_peak_sustained_elapsed", "l1_lsu_pct", "%",
           "busy", None, "L1 load/store wavefronts, % of peak"),
    # memory traffic
    Metric("dram__bytes.sum", "dram_bytes", "byte", "counter", None, "bytes moved to/from DRAM"),
    # floating-point work, per precision (CUDA cores: thread instructions; FMA counts twice)
    Metric(_sass("fadd"), "fadd_inst", "inst", "counter"),
    Metric(_sass("fmul"), "fmul_inst", "inst", "counter"),
    Metric(_sass("ffma"), "ffma_inst", "inst", "counter"),
    Metric(_sass("dadd"), "dadd_inst", "inst", "counter"),
    Metric(_sass("dmul"), "dmul_inst", "inst", "counter"),
    Metric(_sass("dfma"), "dfma_inst", "inst", "counter"),
    Metric(_sass("hadd"), "hadd_inst", "inst", "counter"),
    Metric(_sass("hmul"), "hmul_inst", "inst", "counter"),
    Metric(_sass("hfma"), "hfma_inst", "inst", "counter"),
    # tensor cores: these counters already count operations (2 per multiply-add)
    Metric(f"{_TENSOR}_src_bf16_dst_fp32.sum", "tensor_bf16_flops", "flop", "counter"),
    Metric(f"{_TENSOR}_src_fp16.sum", "tensor_fp16_flops", "flop", "counter"),
    Metric(f"{_TENSOR}_src_tf32_dst_fp32.sum", "tensor_tf32_flops", "flop", "counter"),
    Metric(f"{_TENSOR}_src_fp8.sum", "tensor_fp8_flops", "flop", "counter"),
    Metric(f"{_TENSOR}_src_fp64.sum", "tensor_fp64_flops", "flop", "counter"),
    Metric(f"{_TENSOR}_src_int8.sum", "tensor_int8_ops", "op", "counter"),
    # clocks of this kernel's run (peaks per second = peak per cycle x clock)
    Metric("sm__cycles_elapsed.avg.per_second", "sm_clock_hz", "hz", "clock", "SpeedOfLight"),
    Metric("dram__cycles_elapsed.avg.per_second", "dram_clock_hz", "hz", "clock", "SpeedOfLight"),
    # peaks per cycle, from the device itself (no replay pass needed)
    Metric("dram__bytes.sum.peak_sustained", "peak_dram_bytes_per_cycle", "byte/cycle", "peak"),
    Metric(f"{_sass('ffma')}.peak_sustained", "peak_ffma_per_cycle", "inst/cycle", "peak"),
    Metric(f"{_sass('dfma')}.peak_sustained", "peak_dfma_per_cycle", "inst/cycle", "peak"),
    Metric(f"{_sass('hfma')}.peak_sustained", "peak_hfma_per_cycle", "inst/cycle", "peak"),
    # dense tensor-core peaks: the aggregate counters' peaks are the sparse ones (2x)
    Metric(f"{_TENSOR}_op_hgmma_src_bf16_dst_fp32_sparsity_off.sum.peak_sustained",
           "peak_tensor_bf16_per_cycle", "flop/cycle", "peak"),
    Metric(f"{_TENSOR}_op_hgmma_src_fp16_sparsity_off.sum.peak_sustained",
           "peak_tensor_fp16_per_cycle", "flop/cycle", "peak"),
    Metric(f"{_TENSOR}_op_hgmma_src_tf32_dst_fp32_sparsity_off.sum.peak_sustained",
           "peak_tensor_tf32_per_cycle", "flop/cycle", "peak"),
    Metric(f"{_TENSOR}_src_fp8_sparsity_off.sum.peak_sustained",
           "peak_tensor_fp8_per_cycle", "flop/cycle", "peak"),
    Metric(f"{_TENSOR}_src_fp64.sum.peak_sustained", "peak_tensor_fp64_per_cycle",
           "flop/cycle", "peak"),
    Metric(f"{_TENSOR}_op_igmma_src_int8_sparsity_off.sum.peak_sustained",
           "peak_tensor_int8_per_cycle", "op/cycle", "peak"),
    # launch configuration (recorded at launch: free)
    Metric("launch__grid_size", "grid_size", "block", "launch", "LaunchStats"),
    Metric("launch__block_size", "block_size", "thread", "launch", "LaunchStats"),
    Metric("launch__grid_dim_x", "grid_x", "block", "launch", "LaunchStats"),
    Metric("launch__grid_dim_y", "grid_y", "block", "launch", "LaunchStats"),
    Metric("launch__grid_dim_z", "grid_z", "block", "launch", "LaunchStats"),
    Metric("launch__block_dim_x", "block_x", "thread", "launch", "LaunchStats"),
    Metric("launch__block_dim_y", "block_y", "thread", "launch", "LaunchStats"),
    Metric("launch__block_dim_z", "block_z", "thread", "launch", "LaunchStats"),
    Metric("launch__waves_per_multiprocessor", "waves", "", "launch", "LaunchStats"),
    Metric("launch__registers_per_thread", "registers_per_thread", "register", "launch",
           "LaunchStats"),
    # what sets the theoretical occupancy (analyze/occupancy.py; recorded at launch: free)
    Metric("launch__shared_mem_per_block_static", "shared_static_bytes", "byte", "launch",
           "LaunchStats", "static shared memory per block"),
    Metric("launch__shared_mem_per_block_dynamic", "shared_dynamic_bytes", "byte", "launch",
           "LaunchStats", "dynamic shared memory per block"),
    Metric("launch__shared_mem_per_block_driver", "shared_reserved_bytes", "byte", "launch",
           "LaunchStats", "shared memory per block the driver reserves"),
    Metric("launch__shared_mem_config_size", "shared_config_bytes", "byte", "launch",
           "LaunchStats", "shared memory per SM configured for the launch (the carveout)"),
    # Nsight Compute's own occupancy figures, read to check ours (tests/analyze)
    Metric("sm__maximum_warps_per_active_cycle_pct", "ncu_occupancy_pct", "%", "launch",
           "Occupancy", "theoretical occupancy as Nsight Compute computes it"),
    Metric("launch__occupancy_limit_registers", "ncu_block_limit_registers", "block", "launch",
           "Occupancy", "blocks per SM the registers allow (Nsight Compute)"),
    Metric("launch__occupancy_limit_shared_mem", "ncu_block_limit_shared_memory", "block",
           "launch", "Occupancy", "blocks per SM the shared memory allows (Nsight Compute)"),
    Metric("launch__occupancy_limit_warps", "ncu_block_limit_warps", "block", "launch",
           "Occupancy", "blocks per SM the warp slots allow (Nsight Compute)"),
    Metric("launch__occupancy_limit_blocks", "ncu_block_limit_blocks", "block", "launch",
           "Occupancy", "blocks per SM the hardware allows (Nsight Compute)"),
    # how busy the schedulers keep: in the fast set's one replay pass at no extra cost
    # (measured on an H200 with ncu 2025.3.1: bench/warp_state_passes.py), else NaN
    Metric("sm__warps_active.avg.pct_of_peak_sustained_active", "achieved_occupancy_pct", "%",
           "scheduler", "Occupancy", "achieved occupancy: active warps, % of the SM's maximum"),
    Metric("smsp__warps_eligible.avg.per_cycle_active", "eligible_warps_per_scheduler", "warp",
           "scheduler", "SchedulerStats", "warps ready to issue per scheduler per cycle"),
    Metric("smsp__issue_active.avg.per_cycle_active", "issued_warps_per_scheduler", "warp",
           "scheduler", "SchedulerStats", "instructions issued per scheduler per cycle"),
    # what a latency-bound kernel waits on: collected by the focused second pass only
    # (``profile --stalls``; each takes the fast pass from 1 replay pass to 3: NaN where not
    # collected)
    Metric("smsp__warps_active.avg.per_cycle_active", "active_warps_per_scheduler", "warp",
           "warp_state", "SchedulerStats", "warps resident per scheduler per cycle"),
    *(_stall(reason) for reason in STALL_REASONS),
    # device
    Metric("device__attribute_display_name", "gpu", "", "device"),
    Metric("device__attribute_multiprocessor_count", "sm_count", "", "device"),
    Metric("device__attribute_compute_capability_major", "compute_major", "", "device"),
    Metric("device__attribute_compute_capability_minor", "compute_minor", "", "device"),
    Metric("device__attribute_max_registers_per_multiprocessor", "sm_registers", "register",
           "device"),
    Metric("device__attribute_max_shared_memory_per_multiprocessor", "sm_shared_bytes", "byte",
           "device"),
    Metric("device__attribute_max_warps_per_multiprocessor", "sm_warps", "warp", "device"),
    Metric("device__attribute_max_blocks_per_multiprocessor", "sm_blocks", "block", "device"),
)

# Precision name -> (kernel-table FLOP column, peak-per-cycle column, FLOP per peak unit).
# CUDA-core peaks are FMA instructions per cycle: one FMA is two FLOPs.
PRECISIONS: dict[str, tuple[str, str, float]] = {
    "fp64": ("flops_fp64", "peak_dfma_per_cycle", 2.0),
    "fp32": ("flops_fp32", "peak_ffma_per_cycle", 2.0),
    "fp16": ("flops_fp16", "peak_hfma_per_cycle", 2.0),
    "tensor_bf16": ("tensor_bf16_flops", "peak_tensor_bf16_per_cycle", 1.0),
    "tensor_fp16": ("tensor_fp16_flops", "peak_tensor_fp16_per_cycle", 1.0),
    "tensor_tf32": ("tensor_tf32_flops", "peak_tensor_tf32_per_cycle", 1.0),
    "tensor_fp8": ("tensor_fp8_flops", "peak_tensor_fp8_per_cycle", 1.0),
    "tensor_fp64": ("tensor_fp64_flops", "peak_tensor_fp64_per_cycle", 1.0),
    "tensor_int8": ("tensor_int8_ops", "peak_tensor_int8_per_cycle", 1.0),
}

@dataclass(frozen=True)
class MetricSet:
    """What a sweep asks ``ncu`` to collect."""

    name: str
    metrics: tuple[str, ...] = ()
    sections: tuple[str, ...] = ()
    description: str = ""


#: Optional columns, read where a report has them and never listed as missing: the focused
#: second pass collects them (:data:`STALL_PASS`), and the fast set the scheduler's three
#: since 2026-11-27 (its earlier reports lack them).
OPTIONAL_KINDS = frozenset({"scheduler", "warp_state"})
#: The sets with the SOL section or counters leave the one-pass stand-ins out.
_ALL_NAMES = tuple(m.name for m in METRICS if m.kind not in ("busy", *OPTIONAL_KINDS))
_NO_SOL = tuple(m.name for m in METRICS
                if m.kind not in ("percent", "busy", *OPTIONAL_KINDS))
#: One replay pass: the duration, with what needs no pass at all (launch, device, peaks).
_ONE_PASS = tuple(m.name for m in METRICS
                  if m.kind in ("peak", "launch", "device") or m.column == "duration_ns")
#: The cheap tier: time, DRAM bytes, clocks and the SOL stand-ins; FLOPs come from the calls
#: table.
_FAST = tuple(m.name for m in METRICS
              if m.kind in ("peak", "launch", "device", "clock", "busy", "scheduler")
              or m.column in ("duration_ns", "dram_bytes"))

METRIC_SETS: dict[str, MetricSet] = {
    "roofline": MetricSet(
        "roofline", _ALL_NAMES, ("SpeedOfLight",),
        "durations, SOL percentages and Nsight Compute's bottleneck rule, DRAM bytes, FLOPs "
        "per precision, device peaks: everything the roofline classification uses"),
    "lean": MetricSet(
        "lean", _NO_SOL, (),
        "durations, DRAM bytes, FLOPs per precision and peaks, without the SOL percentages "
        "(fewer replay passes; bound is then judged from the roofline alone)"),
    "full": MetricSet(
        "full", _ALL_NAMES, ("SpeedOfLight", "SpeedOfLight_RooflineChart", "LaunchStats",
                             "Occupancy", "MemoryWorkloadAnalysis", "ComputeWorkloadAnalysis",
                             "SchedulerStats", "WarpStateStats"),
        "the roofline set plus Nsight Compute's main analysis sections (many more passes)"),
    "fast": MetricSet(
        "fast", _FAST, (),
        "durations, DRAM bytes, clocks, four busy counters that stand in for the SOL "
        "percentages and the schedulers' achieved occupancy, eligible and issued warps: FLOPs come from the calls table's analytic counts (flops_basis "
        "'calls'), so every kernel is placed on the roofline and gets a bound with a "
        "fraction of the replay passes"),
    "duration": MetricSet(
        "duration", _ONE_PASS, (),
        "durations and launch configuration only: one pass per kernel and no replay, so "
        "NCCL kernels of a distributed run can be timed; no roofline placement"),
}
#: The sets that profile every kernel in a single pass (nothing is replayed).
SINGLE_PASS_SETS = frozenset({"duration"})
#: What a sweep collects by default: one replay pass per kernel, FLOPs from the calls table.
DEFAULT_METRIC_SET = "fast"
#: The default when no calls table is recorded (FLOPs must then come from counters).
DEFAULT_METRIC_SET_WITHOUT_CALLS = "lean"
#: What ``torch-nsight profile`` collects by default: the fast tier, as sweeps (``instrument()``
#: records the calls table under ``profile`` and puts it into the report).
DEFAULT_PROFILE_METRIC_SET = "fast"

#: The focused second pass of ``torch-nsight profile --stalls`` (docs/findings.md): the
#: duration (to check the match), achieved occupancy, the scheduler's warps and the stall
#: reasons of the latency-bound kernels, as an explicit list. Measured on an H200 with ncu
#: 2025.3.1: these metrics are 8 replay passes per kernel beside the fast set's 1 (the four
#: sections Occupancy, LaunchStats, WarpStateStats and SchedulerStats: 9).
STALL_PASS = MetricSet(
    "stalls", tuple(m.name for m in METRICS
                    if m.kind in ("scheduler", "warp_state") or m.column == "duration_ns"), (),
    "achieved occupancy, eligible, issued and active warps per scheduler and the warp stall "
    "reasons: what a latency-bound kernel waits on")
