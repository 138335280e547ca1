"""Findings whose fix is a switch, mapped to the switch profile --verify applies (on recorded
reports)."""

from __future__ import annotations

from pathlib import Path

import pytest

import torch_nsight
from tests.recorded import load_recorded
from torch_nsight.analyze.findings.switch_fixes import SWITCH_FIXES, fix_target, switch_fix
from torch_nsight.verify_exchange import FIX_OPTIONS, FixSpec, check_fix, target_matches
from torch_nsight.vocabulary import UNATTRIBUTED, path_leaf

DATA = Path(__file__).resolve().parents[1] / "data"


def load(name: str) -> torch_nsight.Profile:
    return load_recorded(DATA / name)


def test_every_switch_is_a_valid_fix() -> None:
    for kind, make in SWITCH_FIXES.items():
        spec = check_fix(make("layers.*.mlp"))
        assert spec.fix in FIX_OPTIONS, kind


@pytest.mark.parametrize(("fixture", "finding", "fix"), [
    ("findings_gemm", "gemm_misaligned", "pad_linear"),
    ("findings_fp32_off", "fp32_no_tensor_cores", "tf32"),
    # a tanh GELU written out: the fused op the finding names, not a compile
    ("findings_chain", "elementwise_chain", "gelu_tanh"),
    ("findings_conv", "layout_conversion", "channels_last"),
    # an unfused Adam step (foreach: the default), and a 2-D convolution's small grids in
    # NCHW: switches of their own, --verify measures them
    ("zoo_families/gru_lm.ncu-rep.xz", "optimizer_not_fused", "fused_optimizer"),
    ("zoo_families/wav2vec2.ncu-rep.xz", "small_grid", "cudnn_benchmark"),
])
def test_the_recorded_findings_name_their_switch_and_its_module(
        fixture: str, finding: str, fix: str) -> None:
    found = load(fixture).finding_table()
    row = found[found["finding"] == finding].iloc[0]
    spec = switch_fix(row)
    assert spec is not None and spec.fix == fix
    if fix in ("pad_linear", "compile", "gelu_tanh"):  # the module the finding names
        path = row["module_path"]
        assert spec.target == ("" if "/" not in path else path_leaf(path))


def test_a_gelu_chain_gets_the_fused_gelu_and_no_compile_of_its_own() -> None:
    """The tanh GELU's chain is switched to the fused op; the attention projections' chains,
    autocast's casts, are no chain any more (they were ``compile@c_attn`` before); a chain too
    small to pay for a compiled region of its own is told to compile the model, whose switch
    compiles the whole model (tests/analyze/test_chain_compile_cost.py)."""
    found = load("decoder_train").finding_table()
    chains = found[found["finding"] == "elementwise_chain"]
    specs = {switch_fix(row).fix: row for _, row in chains.iterrows()
             if switch_fix(row) is not None}
    assert set(specs) == {"gelu_tanh"}
    assert specs["gelu_tanh"]["fix_code"] == "use_gelu_tanh"
    assert specs["gelu_tanh"]["fix"].startswith("Use F.gelu(approximate='tanh')")
    assert not chains["module"].astype(str).str.endswith(("c_attn", "c_proj", "c_fc")).any()
    assert all(switch_fix(row) == FixSpec("compile", "") for _, row in chains.iterrows()
               if row["fix_code"] == "compile_model")
    # the loss's chain: a code change (torch.compile of the loss function), no switch
    loss = chains[chains["cause"] == "loss"].squeeze()
    assert loss["fix_code"] == "compile_loss" and switch_fix(loss) is None


@pytest.mark.parametrize("model", ["bert", "roberta_ragged"])
def test_a_fused_optimizer_is_told_nothing(model: str) -> None:
    """Measured on the H200 (docs/findings.md): BERT's top finding, AdamW's update chain,
    was verified by compiling the whole model, and it advised AdamW(..., fused=True) to a
    step that ran fused already (its FusedAdamMathFunctor kernels). A fused step gets no
    finding at all; a chain left keeps its switch unless its fix is a code change (the
    loss) or the model's compile (too small to compile alone)."""
    profile = load(f"zoo_fast/{model}.ncu-rep.xz")
    step = profile.kernels[profile.kernels["direction"] == "step"]
    assert step["kernel_full"].str.contains("FusedAdamMathFunctor").any()
    found = profile.finding_table()
    assert (found["direction"] != "step").all()
    assert not found["fix_code"].isin(["optimizer_fused", "optimizer_foreach"]).any()
    chains = found[found["finding"] == "elementwise_chain"]
    assert all(switch_fix(row) is not None for _, row in chains.iterrows()
               if row["fix_code"] != "compile_loss")
    assert len(found) > 0


def test_a_folded_finding_targets_every_block() -> None:
    profile = load("hf_gpt2_fast")
    folded = profile.finding_table(fold=True)
    row = folded[(folded["finding"] == "elementwise_chain") & (folded["blocks"] > 1)].iloc[0]
    target = fix_target(row["module_path"])
    assert "{" in target and "*" not in target
    blocks = profile.finding_table(fold=False)
    blocks = blocks[(blocks["finding"] == "elementwise_chain")
                    & (blocks["direction"] == row["direction"])]
    named = {path_leaf(p) for p in blocks["module_path"] if target_matches(target, path_leaf(p))}
    assert len(named) == row["blocks"]


def test_the_whole_model_where_no_module_is_named() -> None:
    assert fix_target(UNATTRIBUTED) == fix_target(None) == fix_target("GPT2LMHeadModel") == ""
    assert switch_fix({"finding": "ncu_CPIStall", "module_path": "M/a"}) is None
    assert switch_fix({"finding": "launch_bound", "module_path": None}).options == {
        "mode": "reduce-overhead"}


def test_a_folded_index_names_only_its_blocks() -> None:
    assert fix_target("M/h.{0,2,5}.mlp") == "h.{0,2,5}.mlp"
    named = [f"h.{i}.mlp" for i in range(8) if target_matches("h.{0,2,5}.mlp", f"h.{i}.mlp")]
    assert named == ["h.0.mlp", "h.2.mlp", "h.5.mlp"]
    assert [i for i in range(10) if target_matches("b.{1-3,7}", f"b.{i}")] == [1, 2, 3, 7]
    assert not target_matches("h.{0-3}.mlp", "h.x.mlp")
    assert target_matches("h.*.mlp", "h.11.mlp") and not target_matches("h.*", "h.1.mlp")
