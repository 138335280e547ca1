"""On every recorded source in tests/data: no finding gives a fix for another kind of module
or op (issue 43): a convolution given a Linear's fix, SGD told AdamW, a fused optimizer told
to fuse, rotary advice where no rotary op ran, "a larger batch" for a gather or a norm, an
aligned GEMM told to pad, Nsight Compute's rule text as a fix.

The findings are read as the analysis returns them (codes) and as render words them; every
expectation is read from the source's own tables (its calls, its kernels' names, its rules),
never typed in."""

from __future__ import annotations

import json
import re
from typing import Any

import pandas as pd
import pytest

import torch_nsight
from tests.golden_sources import Source, find_sources, per_source
from tests.golden_sources import load as golden_load
from torch_nsight.analyze.findings.call_shapes import ALIGNMENT
from torch_nsight.analyze.findings.codes import FIX_CODES, FUSED_OPTIMIZERS, fix_fits
from torch_nsight.analyze.findings.layout_conversion import runs_channels_last
from torch_nsight.analyze.findings.run_checks import TINY_GAIN_NS
from torch_nsight.naming import OPTIMIZER_DIRECTION
from torch_nsight.vocabulary import JOIN_KEYS, OUTSIDE_PREFIX

SOURCES = [s for s in find_sources() if s.kind != "demo"]
#: What makes a rotary embedding: its cos and sin, or rotate-half's negation and cat (each
#: an aten op, a kernel functor or a kernel).
ROTARY = ((r"\bsin\b|sin_kernel", r"\bcos\b|cos_kernel"),
          (r"\bneg\b|neg_kernel", r"\bcat\b|catarraybatchedcopy"))


def _load(path: str) -> torch_nsight.Profile | None:
    """The source as the golden tests read it (once for all the tests of a source that run
    on one worker: :func:`tests.golden_sources.per_source`); None where it does not
    load as a profile."""
    return golden_load(path).profile


def _profile(path: str) -> torch_nsight.Profile:
    """:func:`_load` of a source that loads as a profile."""
    profile = _load(path)
    assert profile is not None, path
    return profile


def _in_group(path: str) -> pytest.MarkDecorator:
    """The xdist group of ``path``'s golden tests (:func:`per_source`): a test that reads one
    source runs on their worker, after them, and reads it from :func:`_load`'s memo."""
    return pytest.mark.xdist_group(path)


def _site_words(profile: torch_nsight.Profile, row: pd.Series) -> str:
    """The ops that ran at a finding's site: the calls table's, its kernels' functors."""
    keys = [k for k in JOIN_KEYS if k != "op"]
    kernels = profile.kernels
    mine = pd.Series(True, index=kernels.index)
    for key in keys:
        value = row[key]
        mine &= kernels[key].isna() if value is None else kernels[key] == value
    words = [*kernels.loc[mine, "kernel"].astype(str),
             *kernels.loc[mine].get("kernel_full", pd.Series(dtype=object)).dropna().astype(str)]
    calls = profile.calls
    if calls is not None and "aten_op" in calls:
        hit = pd.Series(True, index=calls.index)
        for key in keys:
            value = row[key]
            hit &= calls[key].isna() if value is None else calls[key] == value
        words += calls.loc[hit, "aten_op"].astype(str).tolist()
    return " ".join(words).lower()


def _rule_messages(profile: torch_nsight.Profile) -> set[str]:
    if "ncu_rules" not in profile.kernels:
        return set()
    return {rule["message"].split(". ")[0].strip() for text in
            profile.kernels["ncu_rules"].dropna() for rule in json.loads(text)} - {""}


@pytest.mark.parametrize("source", per_source(SOURCES))
def test_every_fix_fits_its_module_and_op(source: Source) -> None:
    profile = _load(source.path)
    if profile is None:
        pytest.skip(f"{source.path} does not load as a profile")
    found = profile.finding_table(fold=False)
    messages = _rule_messages(profile)
    steps = profile.kernels[profile.kernels["direction"] == OPTIMIZER_DIRECTION]
    fused_steps = set(steps.loc[steps["kernel_full"].astype(str).str.contains(
        r"Fused\w*Functor"), "module"]) if "kernel_full" in steps else set()
    for _, row in found.iterrows():
        where = (source.path, row["finding"], row["module"], row["direction"])
        assert not str(row["finding"]).startswith("ncu_"), where  # rules are evidence
        assert not any(m in str(row["fix"]) for m in messages), where
        code = row["fix_code"]
        if row["gain_basis"] == "timeline":
            continue  # the timeline's own verdicts: no module kind to fit
        assert code in FIX_CODES, where
        assert fix_fits(row["module_kind"], code), (*where, row["module_kind"], code)
        params: dict[str, Any] = row["fix_params"]
        fix = str(row["fix"])
        # torch.compile's own kernels are not told to compile
        kernels = str(row["kernels"]).split("; ")
        if all(k.startswith("triton_") for k in kernels):
            assert code not in ("compile_module", "compile_function"), where
        # a convolution is never given a Linear's fix, in codes or in words
        if row["module_kind"] == "conv":
            assert "nn.Linear" not in fix, where
        # an optimizer is told its own class's flag, and only where its step ran unfused
        if code in ("optimizer_fused", "optimizer_foreach", "compile_optimizer_step"):
            recorded = row["module"] if row["direction"] == OPTIMIZER_DIRECTION else None
            assert params["optimizer"] == row["optimizer"] == recorded, where
            assert row["optimizer_impl"] in ("foreach", "for_loop"), where
            if code == "optimizer_fused" and recorded is not None:
                assert recorded in FUSED_OPTIMIZERS, where
            for other in sorted(FUSED_OPTIMIZERS - {recorded}):
                assert f"torch.optim.{other}(" not in fix, where
        if row["direction"] == OPTIMIZER_DIRECTION:
            assert row["module"] not in fused_steps, where
        # a call of the training loop beside the optimizer (clipping, GradScaler) is not it
        if str(row["module"]).startswith(OUTSIDE_PREFIX):
            assert code not in ("optimizer_fused", "optimizer_foreach",
                                "compile_optimizer_step"), where
            assert code != "compile_module", where  # no module holds it to compile
        # attention advice only where attention ran: SDPA where batched matmuls computed it
        # by hand (a log-softmax without them, the decoder's loss, was sent there before),
        # another SDPA backend where an SDPA op ran
        if code in ("use_sdpa", "sdpa_backend"):  # a root-level finding's site is its kernels
            words = " ".join([_site_words(profile, row), str(row["kernels"]).lower(),
                              str(row["aten_ops"]).lower()])
            ran = ("bmm", "baddbmm", "einsum") if code == "use_sdpa" else (
                "scaled_dot_product", "sdpa", "flash", "fmha", "attention")
            assert any(op in words for op in ran), where
        # rotary advice only where a rotary embedding's ops ran
        if code == "compile_rotary":
            words = _site_words(profile, row)
            assert any(all(re.search(w, words) for w in group) for group in ROTARY), where
        # a fix already in place: channels-last for a network that runs channels-last
        if code == "channels_last":
            assert not _channels_last_in_place(profile, row), where
        # a module compiled alone must save more per call than a compiled region costs
        if code == "compile_module" and row["finding"] == "elementwise_chain":
            facts = row["facts"]
            assert row["est_gain_ns"] >= facts["module_calls"] * facts["compiled_call_ns"], where
        # a misaligned GEMM names a dimension that is off its dtype's alignment
        if row["finding"] == "gemm_misaligned" and row["dim_value"] is not None \
                and not pd.isna(row["dim_value"]):
            assert str(row["dtype"]) in ALIGNMENT, where  # not a guess at 8 elements
            align = ALIGNMENT[str(row["dtype"])]
            assert int(row["dim_value"]) % align != 0, where
            assert row["dim_role"] != "tokens", where  # the rows are no operand's stride
            # a vector, or one position (N x C x 1 x 1), is no misalignment
            if code in ("pad_features", "pad_operands") or row["dim_role"] == "spatial":
                assert int(row["dim_value"]) > align, where
    _assert_one_layout(source.path, found)
    _assert_ranked(source.path, profile.findings())


def _channels_last_in_place(profile: torch_nsight.Profile, row: pd.Series) -> bool:
    """Whether PyTorch's channels-last kernels ran in the row's variant and shape at a site
    (module path and direction) whose recorded calls hold a 4-D tensor of more than one pixel,
    or that has no recorded call (a batch norm over N x C x 1 x 1 runs them in an NCHW
    model: that tensor is both layouts; a site without a 4-D tensor lays nothing out)."""
    kernels = profile.kernels
    mine = (kernels["variant"].astype(str) == str(row["variant"])) \
        & (kernels["shape"].astype(str) == str(row["shape"])) & runs_channels_last(kernels)
    calls = profile.calls
    for (path, direction), _ in kernels[mine].groupby(["module_path", "direction"],
                                                      dropna=False):
        if calls is None:
            return True
        here = calls[(calls["module_path"] == path) & (calls["direction"] == direction)]
        if here.empty:
            return True
        four_d = [s for call in here["input_shapes"] for s in call
                  if isinstance(s, tuple) and len(s) == 4]
        if any(not (s[2] == 1 and s[3] == 1) for s in four_d):
            return True
    return False


def _assert_one_layout(path: str, found: pd.DataFrame) -> None:
    """One variant and shape is not told both to go channels-last and that it already is."""
    for _, rows in found.groupby([found["variant"].astype(str), found["shape"].astype(str)]):
        told = (rows["fix_code"] == "channels_last").any()
        already = ((rows["finding"] == "layout_conversion")
                   & (rows["fix_code"] != "channels_last")).any()
        assert not (told and already), (path, rows[["module", "finding", "fix_code"]])


def _assert_ranked(path: str, found: pd.DataFrame) -> None:
    """The findings a user acts on first: gains under what a step's timer resolves last of
    all; before them every row with a fix above every row with none known, each group by
    gain, bounds alone (unknown gains) after the gains, as the user reads them (folded)."""
    found = found.reindex(columns=["finding", "fix_code", "est_gain_ns"])
    tiny = found["est_gain_ns"].astype("float64").lt(TINY_GAIN_NS)
    assert tiny.tolist() == sorted(tiny), (path, found.to_string())
    for part in (found[~tiny], found[tiny]):  # each ranked the same way
        gains = part["est_gain_ns"].astype("float64")
        no_fix = part["fix_code"].eq("none_known")
        assert no_fix.tolist() == sorted(no_fix), (path, found.to_string())
        for flag in (False, True):
            mine = gains[no_fix == flag]
            known = mine.dropna().tolist()
            assert known == sorted(known, reverse=True), path
            assert mine.isna().tolist() == sorted(mine.isna().tolist()), path


@_in_group("zoo_families/gru_lm.ncu-rep.xz")
def test_a_fused_optimizer_ranks_above_causes_no_fix_recovers() -> None:
    """gru_lm's recurrent small grids (no PyTorch-level fix known) once hid its Adam step,
    the switch that measured largest there (docs/zoo.md), at #5."""
    found = _profile("zoo_families/gru_lm.ncu-rep.xz").findings()
    codes = found["fix_code"].tolist()
    assert "none_known" in codes and "optimizer_fused" in codes
    assert codes.index("optimizer_fused") < codes.index("none_known")


#: Fixes of every kind the checks above look at, and a source whose findings give them.
COVERED = {"latency/resnet50.ncu-rep.xz": {"compile_module", "cudnn_benchmark"},
           "decoder_train/fast.ncu-rep.xz": {"pad_features"},
           "findings_conv": {"channels_last", "cudnn_benchmark"},
           "profile_steps.ncu-rep.xz": {"optimizer_fused"},
           "zoo_fast/llama_decode.ncu-rep.xz": {"compile_rotary", "use_rms_norm",
                                                "sdpa_backend"}}


def test_the_covered_sources_give_every_kind_of_fix() -> None:
    assert set().union(*COVERED.values()) == {
        "pad_features", "channels_last", "cudnn_benchmark", "compile_module",
        "optimizer_fused", "compile_rotary", "use_rms_norm", "sdpa_backend"}


@pytest.mark.parametrize("path", [pytest.param(p, marks=_in_group(p)) for p in COVERED])
def test_the_checks_cover_the_recorded_sources(path: str) -> None:
    """The test above reads findings of every kind: it is not vacuous (each source read
    once, on the worker of its golden tests)."""
    seen = set(_profile(path).finding_table(fold=False)["fix_code"].dropna())
    assert COVERED[path] <= seen, (path, sorted(seen))


@_in_group("zoo_families/wav2vec2.ncu-rep.xz")
def test_channels_last_only_where_a_4d_tensor_ran() -> None:
    """wav2vec 2.0's positional convolution is a grouped ``Conv1d`` (3-D input) that cuDNN
    runs with NCHW kernels: its small grid is never told to go channels-last, which lays out
    4-D tensors only (a 2-D convolution's NCHW small grid still is: the test below)."""
    found = _profile("zoo_families/wav2vec2.ncu-rep.xz").finding_table(fold=False)
    conv1d = found[found["module"] == "encoder.transformer.pos_conv_embed.conv"]
    assert len(conv1d) and not (conv1d["fix_code"] == "channels_last").any()


@_in_group("zoo_families/mobilenet_v3.ncu-rep.xz")
def test_a_2d_convolutions_nchw_small_grid_is_told_channels_last() -> None:
    """MobileNetV3's 2-D convolutions run NCHW kernels: told to go channels-last."""
    found = _profile("zoo_families/mobilenet_v3.ncu-rep.xz").finding_table(fold=False)
    assert (found.loc[found["module_kind"] == "conv", "fix_code"] == "channels_last").any()


@_in_group("zoo_families/conformer.ncu-rep.xz")
def test_no_channels_last_where_no_call_took_a_4d_tensor() -> None:
    """torchaudio's Conformer (a verification model) runs ``BatchNorm1d`` and depthwise
    ``Conv1d`` over (N, C, L): PyTorch's NCHW batch-norm kernels, and nothing for
    channels-last to lay out (its only 4-D tensors are attention's heads). Its batch norms'
    calls are no GEMM or convolution, so the check once found no shape for them and counted
    them as NCHW kernels to remove."""
    from torch_nsight.analyze.findings.sites import takes_4d

    profile = _profile("zoo_families/conformer.ncu-rep.xz")
    calls = profile.calls
    assert calls is not None and len(calls)
    batch_norms = calls[calls["module_class"].astype(str).str.endswith("BatchNorm1d")]
    assert len(batch_norms)
    assert not any(takes_4d(shapes) for shapes in batch_norms["input_shapes"])
    assert profile.kernels["kernel"].astype(str).str.contains("batch_norm").any()
    found = profile.finding_table(fold=False)
    assert len(found) and not (found["cause"] == "batch_norm").any()
    assert not (found["fix_code"] == "channels_last").any(), found.to_string()


@_in_group("zoo_families/swin_t.ncu-rep.xz")
def test_attention_written_out_is_told_sdpa_not_padding() -> None:
    """torchvision's Swin-T (a verification model) computes window attention with batched
    matmuls and a softmax: their misaligned stride is the window's 7 x 7 = 49 tokens, the
    length the softmax normalises over, not a Linear's features to pad."""
    profile = _profile("zoo_families/swin_t.ncu-rep.xz")
    calls = profile.calls
    assert calls is not None
    softmax = calls[calls["aten_op"] == "_softmax"]
    lengths = {path: {shapes[0][-1] for shapes in group["input_shapes"]}
               for path, group in softmax.groupby("module_path")}
    by_hand = set(lengths) & set(calls.loc[calls["aten_op"] == "bmm", "module_path"])
    assert by_hand
    found = profile.finding_table(fold=False)
    gemms = found[(found["finding"] == "gemm_misaligned") & found["module_path"].isin(by_hand)]
    assert len(gemms)
    for _, row in gemms.iterrows():
        bad = row["facts"]["bad"]
        sequence = [b for b in bad if b["op"] in ("bmm", "baddbmm")
                    and b["value"] in lengths[row["module_path"]]]
        assert (row["fix_code"] == "use_sdpa") == (len(sequence) == len(bad)), row
        if row["fix_code"] != "use_sdpa":  # nothing of the attention's length is padded
            assert all(p["role"] != "sequence" for p in row["fix_params"]["pads"]), row


@_in_group("zoo_families/deeplab.ncu-rep.xz")
def test_a_one_pixel_batch_norm_is_not_channels_last() -> None:
    """torchvision's DeepLabV3 (a verification model) runs NCHW; its pooling branch's batch
    norm over N x C x 1 x 1 runs PyTorch's channels-last kernels. The network was once
    judged channels-last already ("no switch known") and told to go channels-last in one
    report."""
    profile = _profile("zoo_families/deeplab.ncu-rep.xz")
    kernels, calls = profile.kernels, profile.calls
    assert calls is not None
    ran = kernels.loc[runs_channels_last(kernels)
                      & kernels["kernel"].astype(str).str.contains("channels_last"),
                      "module_path"].unique()
    assert len(ran)
    for path in ran:
        shapes = calls.loc[calls["module_path"] == path, "input_shapes"]
        assert all(s[2] * s[3] == 1 for call in shapes for s in call
                   if isinstance(s, tuple) and len(s) == 4)
    found = profile.finding_table(fold=False)
    layout = found[found["finding"] == "layout_conversion"]
    assert len(layout) and (layout["fix_code"] == "channels_last").all()


@pytest.mark.parametrize("path", [
    pytest.param(p, marks=_in_group(p)) for p in ("zoo_families/lstm_lm.ncu-rep.xz",
                                                  "zoo_families/gru_lm.ncu-rep.xz",
                                                  "outside_lstm/replicated/report.ncu-rep.xz")])
def test_a_cudnn_recurrent_layer_is_not_told_to_fuse_its_own_kernels(path: str) -> None:
    """cuDNN runs a whole nn.LSTM / nn.GRU in one call (``_cudnn_rnn``, its backward) with its
    own elementwise kernels (``elemWiseRNNcell``, ``LSTM_elementWise_bp1``), which
    torch.compile passes through: no elementwise chain, no compile advice, at that site.
    The sites are read from the calls table, the kernels from the report."""
    profile = _profile(path)
    calls = profile.calls
    assert calls is not None
    layers = set(calls.loc[calls["aten_op"].astype(str).str.startswith("_cudnn_rnn"),
                           "module_path"])
    assert layers  # the recording ran cuDNN's recurrent layer
    kernels = profile.kernels[profile.kernels["module_path"].isin(layers)]
    assert kernels["kernel"].astype(str).str.contains("elementWise|elemWise").any()
    found = profile.finding_table(fold=False)
    at_layer = found[found["module_path"].isin(layers)]
    assert not (at_layer["finding"] == "elementwise_chain").any(), at_layer
    assert not at_layer["fix_code"].isin(["compile_module", "compile_model"]).any(), at_layer


@_in_group("zoo_families/mamba.ncu-rep.xz")
def test_a_matrix_vector_product_is_not_padded_nor_a_conv1d_laid_out() -> None:
    """transformers' Mamba (a verification model) without its kernels: the selective scan's
    per-token ``matmul`` has a dimension of 1 (a matrix-vector product), once told "pad 1 to
    64"; its causal ``F.conv1d`` over (N, C, L) runs PyTorch's depthwise 2-D kernels inside
    the mixer, whose other ops take 4-D tensors, and was once told to go channels-last; the
    scan's GEMMs under one wave there were told ``cudnn.benchmark``, the convolution's fix."""
    from torch_nsight.analyze.findings.call_shapes import gemm_dims
    from torch_nsight.analyze.findings.sites import takes_4d

    profile = _profile("zoo_families/mamba.ncu-rep.xz")
    calls = profile.calls
    assert calls is not None
    gemms = calls[calls["aten_op"].isin(["bmm", "mm", "matmul"])]
    assert any(1 in (gemm_dims(op, shapes) or ())
               for op, shapes in zip(gemms["aten_op"], gemms["input_shapes"], strict=True))
    convs = calls[calls["aten_op"].astype(str).str.startswith("convolution")]
    assert len(convs) and not any(takes_4d(shapes) for shapes in convs["input_shapes"])
    mixers = set(convs["module_path"])
    assert any(takes_4d(shapes) for shapes in calls.loc[calls["module_path"].isin(mixers),
                                                         "input_shapes"])
    found = profile.finding_table(fold=False)
    assert len(found)
    assert not (found["finding"] == "gemm_misaligned").any(), found.to_string()
    assert not (found["fix_code"] == "channels_last").any(), found.to_string()
    # the scan's GEMMs under one wave, in the mixer beside its conv1d: a GEMM's fix, not
    # cuDNN's autotuning (they were told cudnn.benchmark as the convolution's)
    assert not (found["fix_code"] == "cudnn_benchmark").any(), found.to_string()
    assert (found["fix_code"] == "larger_batch").any(), found.to_string()


@_in_group("zoo_families/r3d_18.ncu-rep.xz")
def test_a_3d_convolution_is_told_channels_last_3d() -> None:
    """torchvision's R3D-18 (a verification model) runs NCDHW: cuDNN converts each Conv3d's
    5-D tensors to NDHWC and back, once told "no PyTorch-level fix known". The switch is
    ``channels_last_3d`` (``--verify`` lays 5-D tensors out with it)."""
    from torch_nsight.analyze.findings.sites import takes_5d

    profile = _profile("zoo_families/r3d_18.ncu-rep.xz")
    found = profile.finding_table(fold=False)
    layout = found[found["finding"] == "layout_conversion"]
    assert len(layout)
    calls = profile.calls
    assert calls is not None
    for _, row in layout.iterrows():
        mine = calls[(calls["module_path"] == row["module_path"])
                     & (calls["direction"] == row["direction"])]
        assert any(takes_5d(shapes) for shapes in mine["input_shapes"]), row["module_path"]
        assert row["fix_code"] == "channels_last" and row["fix_params"] == {"ndim": 5}
    from torch_nsight.render.finding_words import word_findings

    words = word_findings(found)
    fixes = words.loc[words["finding"] == "layout_conversion", "fix"].astype(str)
    assert fixes.str.contains("torch.channels_last_3d", regex=False).all()


@_in_group("zoo_families/fasterrcnn.ncu-rep.xz")
def test_a_one_block_kernel_is_not_told_a_larger_batch() -> None:
    """torchvision's Faster R-CNN (a verification model): NMS's ``gather_keep_from_mask``
    runs as one block, 21% of the step, once told "give it more work (a larger batch)"."""
    from torch_nsight.analyze.limiter import ONE_BLOCK_NS
    from torch_nsight.render.finding_words import word_findings

    profile = _profile("zoo_families/fasterrcnn.ncu-rep.xz")
    kernels = profile.kernels
    one = kernels[(kernels["grid_size"] == 1) & (kernels["bound"] == "latency")
                  & (kernels["duration_ns"] >= ONE_BLOCK_NS)]
    assert len(one) and (one["limiter"] == "one_block").all()
    longest = one.loc[one["duration_ns"].idxmax()]
    assert longest["duration_ns"] > 100_000  # the serial kernel, not a short reduction
    found = word_findings(profile.finding_table())
    mine = found[found["kernels"].astype(str).str.contains(str(longest["kernel"]),
                                                           regex=False)]
    assert len(mine) and (mine["cause"] == "one_block").all()
    assert (mine["fix_code"] == "none_known").all()
    assert mine["fix"].astype(str).str.contains("one thread block", regex=False).all()
    steps = profile.hotspots()
    step = steps.loc[steps["kernel"] == longest["kernel"], "next_step_code"]
    assert len(step) and (step == "one_block").all()


@_in_group("zoo_families/fasterrcnn.ncu-rep.xz")
def test_tf32_is_not_advised_where_the_step_ran_it_already() -> None:
    """Faster R-CNN (a verification model) trains in fp32 with ``cudnn.allow_tf32`` at its
    default, on: cuDNN ran TF32 kernels for some convolutions and FFMA ones for others, which
    were told to turn TF32 on. A ``profile`` of a script records no settings, so the step's
    own TF32 kernels are what says the switch is on; its Linears' cuBLAS GEMMs ran FFMA with
    ``cuda.matmul.allow_tf32`` off, and keep their finding."""
    profile = _profile("zoo_families/fasterrcnn.ncu-rep.xz")
    assert not profile.meta.settings
    kernels = profile.kernels
    tf32 = kernels[kernels["precision"] == "tensor_tf32"]
    assert tf32["kernel"].astype(str).str.endswith("_cudnn").any()
    found = profile.finding_table(fold=False)
    fp32 = found[found["finding"] == "fp32_no_tensor_cores"]
    assert not (fp32["fix_code"] == "tf32_conv").any(), fp32.to_string()
    assert (fp32["fix_code"] == "tf32_matmul").any()
