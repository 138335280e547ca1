"""The words of the hotspot tables and the kernel table, written here from their codes: each
kernel's ``reason`` (:mod:`torch_nsight.render.reason_words`) and each hotspot's
``next_step`` (:data:`NEXT_STEP`, keyed by :func:`torch_nsight.analyze.hotspots.next_step_code`).

Importing this module registers :func:`word_hotspots` and :func:`word_kernels` with the
Profile record (:func:`torch_nsight.profile.set_words`): ``Profile.hotspots()`` and the
kernel table of a loaded profile hold the words, analysis the codes.
"""

from __future__ import annotations

from collections.abc import Mapping

import pandas as pd

from torch_nsight.analyze.frames import each_distinct
from torch_nsight.analyze.limiter import REASON_INPUTS, VERDICT_INPUTS
from torch_nsight.profile import set_words
from torch_nsight.render.reason_words import dominant_reason, reason_words

#: What to change, for each ``next_step_code``, the action first; a latency-bound kernel's
#: limiter names its own (its numbers are in the reason).
NEXT_STEP = {
    "one_block": "no PyTorch-level fix known: one thread block does the launch's whole work "
                 "on one SM, and a larger batch adds work, not blocks; fewer elements take "
                 "less",
    "small_grid": "give it more work (a larger batch) or fuse it (torch.compile): under "
                  "one wave",
    "tail": "fill whole waves (batch, sequence length) or fuse it (torch.compile): "
            "a partial last wave",
    "registers": "try another kernel or backend ({alternatives}): occupancy limited by "
                 "registers",
    "shared_memory": "try another kernel or backend ({alternatives}): occupancy limited by "
                     "shared memory",
    "block_size": "try another kernel or backend (torch.compile): occupancy limited by its "
                  "block size",
    "blocks_per_sm": "fuse it (torch.compile) or use another kernel: blocks too small to "
                     "fill an SM",
    # causes named from the warp states (profile --stalls: analyze/stalls.py)
    "launch_overhead": "cut launches: CUDA graphs (torch.compile(mode='reduce-overhead')) or "
                       "fuse it with its neighbours (torch.compile): a launch of a few µs",
    "few_warps": "give it more work (a larger batch) or fuse it (torch.compile): achieved "
                 "occupancy far below theoretical",
    "waiting_warps": "fuse it with its neighbours (torch.compile) or cut its memory "
                     "accesses: its warps wait (profile --stalls tells on what)",
    "memory_latency": "fuse it with its neighbours (torch.compile) or cut its memory "
                      "accesses: warps wait on global memory",
    "synchronization": "try another kernel or backend ({alternatives}): warps wait at "
                       "barriers",
    "instruction_issue": "cut instructions or pick another kernel ({alternatives}, a lower "
                         "precision): instruction issue or a math pipe is the limit",
    "shared_memory_access": "try another kernel or backend ({alternatives}): warps wait on "
                            "shared memory",
    # latency-bound without a limiter
    "under_one_wave": "fuse it or give it more blocks ({more_blocks}): under one wave",
    "check_library_below_roof": "check shapes, alignment and dtype: far below its roof (the "
                                "roofline metric set tells an L1/L2 limit from latency)",
    "profile_roofline_set": "far below its roof: profile it with the roofline metric set to "
                            "tell an L1/L2 limit from latency (occupancy, stalls)",
    "profile_stalls": "profile it with metric_set='full' to see its stalls (WarpStateStats): "
                      "the launch is not the limit",
    # memory-bound
    "check_library_on_chip": "check shapes, alignment and dtype: L1/L2-bound, the DRAM "
                             "roofline is not the limit",
    "cut_on_chip_traffic": "cut L1/L2 traffic (reuse, tiling, shared memory): the DRAM "
                           "roofline is not the limit",
    "cut_dram_traffic": "cut DRAM traffic: fuse with neighbours, lower-precision data, avoid "
                        "copies",
    "cut_memory_traffic": "cut memory traffic (fuse, avoid copies): MemoryWorkloadAnalysis "
                          "names the busy unit",
    # compute-bound
    "cut_instructions": "cut instructions (index math, conversions): SM busy, few FLOPs per "
                        "DRAM byte",
    "use_tensor_cores": "move the work to tensor cores: compute-bound on CUDA cores "
                        "({precision})",
    "library_on_cuda_cores": "move the work to tensor cores: a GEMM or convolution on CUDA "
                             "cores ({precision})",
    "check_library_shapes": "check GEMM/conv shapes, alignment and dtype: far below its FLOP "
                            "roof",
    "less_work_near_roof": "do less work or use a lower precision: near the FLOP roof",
    "less_work": "do less work or use a lower precision: compute-bound",
    "no_counters": "no counters (a trace, or --metric-set duration): profile it under Nsight "
                   "Compute (torch_nsight.sweep, torch-nsight profile) to classify it",
}


#: The aten ops whose hotspots are GEMMs (split-K gives them more blocks).
_GEMM_OPS = frozenset({"mm", "addmm", "bmm", "baddbmm", "matmul", "linear", "addmv", "mv",
                       "_grouped_mm", "_scaled_mm", "_scaled_grouped_mm"})


def _ops(ops: object) -> list[str]:
    """The aten op names of a hotspot's ``aten_ops`` (``"mul, addmm"``)."""
    return [op.strip() for op in ops.split(",")] if isinstance(ops, str) else []


def _alternatives(ops: object) -> str:
    """The other kernels or backends worth trying for a hotspot's aten ops (``aten_ops``):
    Inductor's for any; for attention an SDPA backend, for a convolution cuDNN's search."""
    names = _ops(ops)
    found = ["torch.compile"]
    if any("scaled_dot_product" in op or op.endswith("attention") for op in names):
        found.append("another SDPA backend: torch.nn.attention.sdpa_kernel")
    if any(op.startswith(("convolution", "cudnn_convolution", "_convolution"))
           for op in names):
        found.append("cudnn.benchmark")
    return ", ".join(found)


def _more_blocks(ops: object) -> str:
    """How a hotspot's op gets more blocks: a GEMM by split-K as well as a larger batch."""
    return "batch, split-K" if _GEMM_OPS & set(_ops(ops)) else "a larger batch"


def next_step_words(code: object, row: Mapping[str, object]) -> str | None:
    """The ``next_step`` of one hotspot row: its code's words, with the row's precision and
    the alternatives its aten ops have where they name them; None for a row without a
    code."""
    if not isinstance(code, str) or code not in NEXT_STEP:
        return None
    ops = row.get("aten_ops")
    return NEXT_STEP[code].format(precision=row.get("precision"),
                                  alternatives=_alternatives(ops),
                                  more_blocks=_more_blocks(ops))


def _beside(table: pd.DataFrame, code: str, words: str, values: list[object]) -> pd.DataFrame:
    """``table`` with ``words`` inserted just before its column ``code``."""
    out = table.drop(columns=[words], errors="ignore")
    out.insert(list(out.columns).index(code), words, pd.Series(values, index=out.index,
                                                               dtype=object))
    return out


def word_hotspots(table: pd.DataFrame) -> pd.DataFrame:
    """A hotspot table (:func:`torch_nsight.analyze.hotspots`, kernel or module level) with
    its words: ``reason`` and the ``reason_code`` it words in the place of the
    ``reason_facts`` they come from (kernels), ``next_step`` before ``next_step_code``."""
    out = table
    if "reason_facts" in out:
        reasons = [dominant_reason(f) for f in out["reason_facts"]]
        out = _beside(out, "reason_facts", "reason", [words for words, _ in reasons])
        out = _beside(out, "reason_facts", "reason_code", [code for _, code in reasons])
        out = out.drop(columns=["reason_facts"])
    if "next_step_code" in out:
        rows = out.to_dict("records")
        out = _beside(out, "next_step_code", "next_step",
                      [next_step_words(r["next_step_code"], r) for r in rows])
    return out


def word_kernels(kernels: pd.DataFrame) -> pd.DataFrame:
    """An analyzed kernel table with each launch's ``reason`` worded from its codes (a
    table without ``reason_code``, saved before the codes, keeps its words)."""
    if "reason_code" not in kernels:
        return kernels
    inputs = kernels[[c for c in REASON_INPUTS if c in kernels]].copy()
    # a row not latency-bound is worded from classify's columns alone: fewer distinct rows
    others = inputs.get("bound", pd.Series(None, index=inputs.index)).ne("latency")
    launch = [c for c in inputs if c not in VERDICT_INPUTS]
    if launch:
        flags = [c for c in launch if inputs[c].dtype == bool]  # (no missing value to take)
        inputs[flags] = inputs[flags].astype(object)
        inputs.loc[others.to_numpy(), launch] = None
    words = each_distinct(inputs, reason_words) if len(kernels) else []
    return kernels.assign(reason=pd.Series(words, index=kernels.index, dtype=object))


set_words("hotspots", word_hotspots)
set_words("kernels", word_kernels)
