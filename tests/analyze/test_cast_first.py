"""A whole model's compile where the experts' grouped GEMMs ran fp32 beside bf16 GEMMs: cast
first, then compile (``cast_then_compile``), on the recorded MoE steps; a dense step keeps
``compile_model`` (tests/data/zoo_families, H100/H200 recordings)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

import torch_nsight
from tests.recorded import load_recorded
from torch_nsight.analyze.findings.cast_first import cast_first_row
from torch_nsight.analyze.findings.step_idle import add_step_idle, step_idle
from torch_nsight.analyze.findings.switch_fixes import switch_fix

ZOO = Path(__file__).resolve().parents[1] / "data" / "zoo_families"


def _findings(name: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    profile = load_recorded(ZOO / f"{name}.ncu-rep.xz")
    found = profile.findings
    return (found() if callable(found) else found), profile.kernels


@pytest.mark.parametrize("moe", ["mixtral_moe", "qwen2_moe"])
def test_a_moe_whose_experts_ran_fp32_is_told_to_cast_before_it_compiles(moe: str) -> None:
    found, kernels = _findings(moe)
    casts = found[found["fix_code"].eq("cast_to_half")]
    assert len(casts) and all("_grouped_mm" in p["ops"] for p in casts["fix_params"])
    assert not found["fix_code"].eq("compile_model").any()
    after = found[found["fix_code"].eq("cast_then_compile")]
    assert len(after) >= 5, found["fix_code"].value_counts()
    params = after["fix_params"].iat[0]
    assert params["ops"] == ["_grouped_mm"] and params["dtype"] == "bfloat16"
    assert params["modules"] == ["model.layers.{0-3}.mlp.experts"]
    assert all(switch_fix(row) is None for _, row in after.iterrows())  # --verify: the cast
    assert "first cast _grouped_mm in model.layers.{0-3}.mlp.experts to bfloat16" in \
        after["fix"].iat[0]
    # the step's idle time, found by --verify's bare step (here: a step twice its kernels')
    runs = kernels["run"].nunique() if "run" in kernels else 1
    row = step_idle(kernels, 2.0 * kernels["duration_ns"].sum() / runs)
    assert row is not None and row["fix_code"] == "compile_model"  # alone, it cannot know
    assert cast_first_row(found, row)["fix_code"] == "cast_then_compile"  # before --verify
    added = add_step_idle(found, row)
    idle = added[added["finding"].eq("step_idle")]
    assert idle["fix_code"].tolist() == ["cast_then_compile"]
    assert not _compiles_the_model(added)  # no switch compiles the model before the cast


def _compiles_the_model(found: pd.DataFrame) -> bool:
    specs = [switch_fix(row) for _, row in found.iterrows()]
    return any(s is not None and s.fix == "compile" and not s.target for s in specs)


def test_a_dense_model_keeps_its_compile() -> None:
    found, kernels = _findings("llama_train")
    assert not found["fix_code"].eq("cast_to_half").any()
    assert found["fix_code"].eq("compile_model").any()
    assert not found["fix_code"].eq("cast_then_compile").any()
    runs = kernels["run"].nunique() if "run" in kernels else 1
    row = step_idle(kernels, 2.0 * kernels["duration_ns"].sum() / runs)
    assert row is not None
    assert cast_first_row(found, row)["fix_code"] == "compile_model"
    added = add_step_idle(found, row)
    assert added.loc[added["finding"].eq("step_idle"), "fix_code"].tolist() == ["compile_model"]
    assert _compiles_the_model(added)


def test_a_dense_model_loaded_beside_a_moe_keeps_its_compile() -> None:
    """Two reports loaded together are two shapes: the MoE's fp32 experts say nothing of the
    dense model's compile (its findings named experts it does not have)."""
    profile = torch_nsight.load([ZOO / "mixtral_moe.ncu-rep.xz", ZOO / "llama_train.ncu-rep.xz"],
                                cache=False)  # two files at once: the reader's own path
    found = profile.findings()
    dense = found[found["shape"].eq("llama_train")]
    assert dense["fix_code"].eq("compile_model").any(), dense["fix_code"].value_counts()
    assert not dense["fix_code"].eq("cast_then_compile").any()
    assert not dense["fix"].str.contains("_grouped_mm", regex=False).any()
    moe = found[found["shape"].eq("mixtral_moe")]
    assert moe["fix_code"].eq("cast_then_compile").sum() >= 5
    assert not moe["fix_code"].eq("compile_model").any()


def test_no_words_say_verify_measures_a_compile_it_has_no_switch_for() -> None:
    """``cast_then_compile`` has no switch: --verify measures the compile only once the cast
    is made, so neither the step-idle fix nor the note under the table says it measures it."""
    from torch_nsight.render.finding_words import word_findings
    from torch_nsight.render.findings import render_findings

    profile = load_recorded(ZOO / "mixtral_moe.ncu-rep.xz")
    found, kernels = profile.findings(), profile.kernels
    runs = kernels["run"].nunique() if "run" in kernels else 1
    row = step_idle(kernels, 2.0 * kernels["duration_ns"].sum() / runs)
    assert row is not None
    fix = word_findings(pd.DataFrame([cast_first_row(found, row)]))["fix"].iat[0]
    assert "--verify measures it, after the cast. But first cast _grouped_mm" in fix, fix
    note = " ".join(render_findings(found, "plain", kernels).split()).split("≤: ")[-1]
    assert note.endswith("--verify measures it on your steps, once the cast those fixes ask "
                         "for first is made."), note
    dense = load_recorded(ZOO / "llama_train.ncu-rep.xz")
    idle = step_idle(dense.kernels, 2.0 * dense.kernels["duration_ns"].sum())
    assert idle is not None
    assert word_findings(pd.DataFrame([idle]))["fix"].iat[0].endswith("--verify measures it.")
