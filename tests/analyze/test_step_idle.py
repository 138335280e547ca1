"""The step_idle finding: the bare step ``--verify`` timed against the profiled kernels'
time, on recorded steps and bare steps measured on the GPU machine
(``bench/ncu_unprofiled_steps_2026-11-28.json``: the same models' steps timed without any
profiler, H200, the machine the recordings were made on)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest

import torch_nsight
from torch_nsight.analyze.findings.step_idle import BARE_STEP_BASIS, add_step_idle, step_idle
from torch_nsight.analyze.findings.switch_fixes import switch_fix
from torch_nsight.analyze.steps import SMALL_KERNEL_NS
from torch_nsight.analyze.verdicts import FINDING_PCT, SMALL_KERNEL_PCT
from torch_nsight.render.finding_words import word_finding

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data"
BARE = json.loads((ROOT / "bench" / "ncu_unprofiled_steps_2026-11-28.json").read_text())


def load_source(name: str) -> torch_nsight.Profile:
    return torch_nsight.load(DATA / name)


def bare_medians(model: str) -> list[float]:
    """The model's bare steps (median of each run, ns), as measured."""
    return [r["median_ms"] * 1e6 for r in BARE["records"]
            if r["model"] == model and r["run"].startswith("bare")]


@pytest.fixture(scope="module")
def llama() -> pd.DataFrame:
    return load_source("zoo_families/llama_train.ncu-rep.xz").kernels


def test_a_launch_bound_step_is_told_to_compile_the_model(llama: pd.DataFrame) -> None:
    """llama_train's 1,002 launches, most shorter than a launch takes, sum to about 13 ms; its
    bare steps took 23-35 ms: the GPU waits for the launches, and the fix is the model's
    compile, which --verify can switch."""
    kernel_ns = float(llama["duration_ns"].sum())
    small = 100.0 * float((llama["duration_ns"] < SMALL_KERNEL_NS).mean())
    assert small >= SMALL_KERNEL_PCT
    for bare in bare_medians("llama_train"):
        row = step_idle(llama, bare)
        assert row is not None
        assert row["finding"] == "step_idle" and row["cause"] == "launch_overhead"
        assert row["fix_code"] == "compile_model" and row["gain_basis"] == BARE_STEP_BASIS
        assert row["est_gain_ns"] == pytest.approx(bare - kernel_ns)
        assert row["facts"]["idle_pct"] == pytest.approx(100 * (bare - kernel_ns) / bare)
        assert row["module"] == "LlamaForCausalLM" and row["module_class"] == "LlamaForCausalLM"
        spec = switch_fix(row)
        assert spec is not None and (spec.fix, spec.target) == ("compile", "")
        evidence, fix = word_finding(row)
        assert evidence is not None and fix is not None
        assert "without the profiler" in evidence and f"{len(llama)} launches" in evidence
        assert "torch.compile the model" in fix


def test_a_step_its_kernels_fill_has_no_finding() -> None:
    """gin's 71 kernels sum to about 7.0 ms; its bare steps took 6.99 ms (ncu's serialized
    kernels can even sum above the bare step): no idle worth a finding."""
    gin = load_source("zoo_families/gin.ncu-rep.xz").kernels
    for bare in bare_medians("gin"):
        assert 100.0 * (bare - gin["duration_ns"].sum()) / bare < FINDING_PCT
        assert step_idle(gin, bare) is None


def test_the_cpu_own_work_has_no_switch() -> None:
    """One long GEMM and a step three times its time: the GPU idles, but its launches are not
    short, so no switch is named (the timeline says where the CPU spends it)."""
    kernels = load_source("findings_fp32_off/sweep.ncu-rep.xz").kernels
    assert len(kernels) == 1 and kernels["duration_ns"].iat[0] > SMALL_KERNEL_NS
    row = step_idle(kernels, 3.0 * float(kernels["duration_ns"].iat[0]))
    assert row is not None and row["cause"] is None and row["fix_code"] == "none_known"
    assert switch_fix(row) is None
    assert "--timeline" in str(word_finding(row)[1])


def test_several_shapes_are_not_judged_against_one_bare_step() -> None:
    kernels = load_source("sweep_stack/sweep.ncu-rep.xz").kernels
    assert kernels[["variant", "shape"]].drop_duplicates().shape[0] > 1
    assert step_idle(kernels, 1e12) is None
    assert step_idle(kernels.iloc[:0], 1e9) is None
    assert step_idle(kernels, math.nan) is None


def test_the_finding_takes_its_rank_among_the_others(llama: pd.DataFrame) -> None:
    """Added to llama_train's findings, it ranks by its gain among the fixes; the table's
    numeric columns stay numeric."""
    found = load_source("zoo_families/llama_train.ncu-rep.xz").finding_table()
    row = step_idle(llama, max(bare_medians("llama_train")))
    assert row is not None
    both = add_step_idle(found, row)
    assert len(both) == len(found) + 1
    assert both["est_gain_ns"].dtype.kind == "f"
    position = int((both["finding"] == "step_idle").to_numpy().argmax())
    larger = found[found["fix_code"].ne("none_known")
                   & found["est_gain_ns"].gt(row["est_gain_ns"])]
    assert position == len(larger)
    assert both.loc[position, "variant"] is None and both.loc[position, "shape"] is None
    assert both["blocks"].dtype.kind == "i" and both.loc[position, "blocks"] == 1


def _verify_idle(model: str) -> tuple[float, float]:
    """(the bare step, the idle time) in ns, as ``--verify`` measured them on the GPU machine
    (``bench/zoo_results/verify_2026-11-29/``, H200, 2026-11-29)."""
    runs = json.loads((ROOT / "bench" / "zoo_results" / "verify_2026-11-29"
                       / "bare_steps.json").read_text())
    return runs[model]["bare_step_ms"] * 1e6, runs[model]["idle_ms"] * 1e6


def test_ops_of_data_dependent_size_are_not_told_to_compile() -> None:
    """Faster R-CNN's step runs nonzero and NMS: the CPU waits on the GPU at each, and a
    compile breaks its graph there (the model's compile measured 0.18 ms of the 41 ms the GPU
    idled, noise). No switch is named; the idle time is a bound, not a gain, so the counted
    gains rank before it. Mamba's scan, which runs none of them, keeps the compile (measured
    at 1.1x the idle time the same day)."""
    profile = load_source("zoo_families/fasterrcnn.ncu-rep.xz")
    kernels = profile.kernels
    bare, _ = _verify_idle("fasterrcnn")
    assert step_idle(kernels, bare)["fix_params"] == {"ops": ["nonzero", "nms"]}  # type: ignore[index]
    row = step_idle(kernels, bare, profile.calls)
    assert row is not None and row["cause"] == "data_dependent"
    assert row["fix_code"] == "fixed_shapes" and row["fix_params"] == {"ops": ["nonzero", "nms"]}
    assert switch_fix(row) is None
    assert math.isnan(row["est_gain_ns"])
    assert row["gain_bound_ns"] == pytest.approx(bare - kernels["duration_ns"].sum())
    evidence, fix = word_finding(row)
    assert "nonzero and NMS" in str(evidence) and "nonzero_static" in str(fix)
    found = add_step_idle(profile.finding_table(), row)
    assert found["finding"].iat[0] != "step_idle"
    mamba = load_source("zoo_families/mamba.ncu-rep.xz")
    bare, idle = _verify_idle("mamba")
    row = step_idle(mamba.kernels, bare, mamba.calls)
    assert row is not None and row["fix_code"] == "compile_model"
    assert row["est_gain_ns"] == pytest.approx(idle, rel=0.05)


def test_boolean_mask_indexing_is_read_from_the_calls() -> None:
    """GAT's convolutions index with a boolean mask (x[mask], aten's index with a bool index):
    from the calls table it is a data-dependent op; the kernels' ops do not show it."""
    gat = load_source("zoo_families/gat.ncu-rep.xz")
    bare = 3.0 * float(gat.kernels["duration_ns"].sum())
    row = step_idle(gat.kernels, bare, gat.calls)
    assert row is not None and row["fix_params"] == {"ops": ["index_mask"]}
    assert "x[mask]" in str(word_finding(row)[0])
    assert step_idle(gat.kernels, bare)["fix_code"] != "fixed_shapes"  # type: ignore[index]

