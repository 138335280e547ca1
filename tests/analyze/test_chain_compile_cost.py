"""Elementwise chains that compiling cannot fuse or cannot pay for (issue 43; measured with
``--verify`` on the GPU, docs/findings.md): autocast's dtype copies of a Linear's weight,
bias and input are no chain; a module whose chain saves less per call than a compiled
region costs (:data:`COMPILED_CALL_NS`) is told to compile the model, not itself."""

from __future__ import annotations

from tests.golden_sources import DATA
from tests.recorded import load_recorded
from torch_nsight.analyze.findings.elementwise_chain import COMPILED_CALL_NS, COPY_FUNCTORS
from torch_nsight.analyze.findings.switch_fixes import switch_fix
from torch_nsight.verify_exchange import FixSpec

FAMILIES = DATA / "zoo_families"


def test_autocast_casts_are_no_chain() -> None:
    profile = load_recorded(FAMILIES / "wav2vec2.ncu-rep.xz")
    kernels = profile.kernels
    q_proj = kernels[kernels["module_path"].astype(str).str.endswith("layers.3.attention.q_proj")
                     & (kernels["direction"] == "fwd")]
    copies = q_proj["kernel_full"].astype(str).str.contains("|".join(COPY_FUNCTORS))
    assert copies.sum() >= 3  # the casts are there: three in a row before the GEMM
    found = profile.finding_table(fold=False)
    chains = found[found["finding"] == "elementwise_chain"]
    assert len(chains)  # other chains are still found
    for name in ("q_proj", "k_proj", "v_proj", "intermediate_dense"):
        assert not chains["module"].astype(str).str.endswith(name).any(), name


def test_a_chain_too_small_to_compile_alone_is_told_to_compile_the_model() -> None:
    # MobileNetV3's classifier (a GRU's chains were cuDNN's own kernels: no chain since)
    found = load_recorded(FAMILIES / "mobilenet_v3.ncu-rep.xz").finding_table(
        fold=False)
    chains = found[found["finding"] == "elementwise_chain"]
    small = chains[chains["fix_code"] == "compile_model"]
    assert len(small)
    for _, row in small.iterrows():
        facts = row["facts"]
        assert row["est_gain_ns"] < facts["module_calls"] * COMPILED_CALL_NS
        assert "torch.compile the model" in row["fix"]
        # its switch is the fix it gives: the whole model compiled, never the module alone
        assert switch_fix(row) == FixSpec("compile", "")
    assert not (chains["fix_code"] == "compile_module").any()
