"""Attribution of kernels to modules from their NVTX ranges (pure pandas)."""

from __future__ import annotations

import pandas as pd
import pytest

from torch_nsight import naming
from torch_nsight.analyze import UNATTRIBUTED, attribute, label_shapes
from torch_nsight.analyze.attribute import ATTRIBUTION_COLUMNS, attribute_ranges
from torch_nsight.errors import MissingMetricError
from torch_nsight.vocabulary import in_module_range, outside_module

LABEL = naming.format_measure_range(variant="eager", shape="1x512", run=2)


def as_dict(result: tuple) -> dict:
    return dict(zip(ATTRIBUTION_COLUMNS, result, strict=True))


def test_innermost_module_range_is_the_module() -> None:
    got = as_dict(attribute_ranges(("LlamaBlock", "self_attn", "self_attn.qkv_proj"), (), ()))
    assert got["module"] == "self_attn.qkv_proj"
    assert got["module_path"] == "LlamaBlock/self_attn/self_attn.qkv_proj"
    assert got["depth"] == 2
    assert got["direction"] == "fwd"
    assert got["op"] is None and got["context"] is None


def test_backward_ranges_give_direction_and_plain_names() -> None:
    got = as_dict(attribute_ranges(("bwd:LlamaBlock", "bwd:mlp", "bwd:mlp.down_proj"), (), ()))
    assert (got["module"], got["direction"]) == ("mlp.down_proj", "bwd")
    assert got["module_path"] == "LlamaBlock/mlp/mlp.down_proj"


def test_op_range_sets_op_and_keeps_the_enclosing_module() -> None:
    got = as_dict(attribute_ranges(("LlamaBlock", "mlp", naming.op_message("silu")), (), ()))
    assert (got["module"], got["op"]) == ("mlp", "silu")
    assert got["depth"] == 1


def test_sweep_label_range_gives_variant_shape_run_and_marker_is_dropped() -> None:
    got = as_dict(attribute_ranges(("LlamaBlock",), (naming.MEASURE_MESSAGE, LABEL), ()))
    assert (got["variant"], got["shape"], got["run"]) == ("eager", "1x512", 2)
    assert got["context"] is None


def test_other_ranges_become_context_not_modules() -> None:
    got = as_dict(attribute_ranges((naming.WARMUP_MESSAGE, "LlamaBlock"), ("phase",),
                                   ("train_step", "my range")))
    assert got["module"] == "LlamaBlock"
    assert got["context"] == "phase / warmup / train_step / my range"


def test_kernel_outside_module_ranges_is_kept_unattributed() -> None:
    got = as_dict(attribute_ranges((), (), ("user",)))
    assert got["module"] == UNATTRIBUTED and got["module_path"] == UNATTRIBUTED
    assert got["direction"] is None and got["depth"] == 0


def test_an_op_range_outside_every_module_names_the_kernel_row() -> None:
    forward = as_dict(attribute_ranges((naming.op_message("cross_entropy"),), (), ()))
    backward = as_dict(attribute_ranges((naming.backward_op_message("cross_entropy"),), (), ()))
    for got, direction in ((forward, "fwd"), (backward, "bwd")):
        assert got["module"] == got["module_path"] == outside_module("cross_entropy")
        assert (got["direction"], got["depth"], got["op"]) == (direction, 0, "cross_entropy")
    assert outside_module("cross_entropy") == "(outside) cross_entropy"
    assert not in_module_range(forward["module"]) and not in_module_range(UNATTRIBUTED)
    # an optimizer's step stays its own row, a call inside it is its op
    got = as_dict(attribute_ranges((naming.step_message("AdamW"),
                                    naming.op_message("cross_entropy")), (), ()))
    assert (got["module"], got["direction"], got["op"]) == ("AdamW", "step", "cross_entropy")
    assert in_module_range(got["module"])


def test_an_op_of_the_step_phase_outside_every_module_is_a_step_row() -> None:
    assert naming.parse_message("step:op:clip_grad_norm_") == naming.RangeKind(
        "op", "clip_grad_norm_", naming.OPTIMIZER_DIRECTION)
    got = as_dict(attribute_ranges((naming.step_op_message("clip_grad_norm_"),), (), ()))
    assert (got["module"], got["direction"], got["op"]) == (
        outside_module("clip_grad_norm_"), naming.OPTIMIZER_DIRECTION, "clip_grad_norm_")


def test_a_backward_op_range_inside_a_module_backward_is_its_op() -> None:
    assert naming.parse_message("bwd:op:cross_entropy") == naming.RangeKind(
        "op", "cross_entropy", "bwd")
    got = as_dict(attribute_ranges(("bwd:Model", naming.backward_op_message("mse_loss")),
                                   (), ()))
    assert (got["module"], got["direction"], got["op"]) == ("Model", "bwd", "mse_loss")


def test_a_collective_outside_every_module_is_named_after_it() -> None:
    got = as_dict(attribute_ranges((), (), ("ncclAllReduce",)))
    assert (got["module"], got["op"], got["direction"]) == (
        outside_module("ncclAllReduce"), "ncclAllReduce", None)


def test_attribute_adds_columns_and_keeps_every_row() -> None:
    df = pd.DataFrame({
        "duration_ns": [1.0, 2.0, 3.0],
        "range_stack": [("Net", "fc"), (), ("bwd:Net",)],
        "range_start_end": [(LABEL,), (LABEL,), ()],
        "range_other": [(), (), ()],
    })
    out = attribute(df)
    assert len(out) == 3
    assert out["module"].tolist() == ["fc", UNATTRIBUTED, "Net"]
    assert out["direction"].tolist() == ["fwd", None, "bwd"]
    assert out["shape"].tolist() == ["1x512", "1x512", None]
    assert "range_stack" in out and "module" not in df  # input untouched


def test_attribute_tolerates_missing_other_range_columns() -> None:
    out = attribute(pd.DataFrame({"duration_ns": [1.0], "range_stack": [()]}))
    assert out["module"].tolist() == [UNATTRIBUTED]


def test_attribute_names_the_column_a_source_lacks() -> None:
    # Passes declare the columns they read (issue 7): a source without a range stack gets
    # a clear error instead of every kernel silently unattributed.
    with pytest.raises(MissingMetricError, match="attribute needs the column.s. range_stack"):
        attribute(pd.DataFrame({"duration_ns": [1.0]}))


def test_label_shapes_fills_only_unlabelled_rows() -> None:
    df = pd.DataFrame({"source": ["a", "b", "b"], "shape": ["4x4", None, None]})
    out = label_shapes(df, {"a": "ignored", "b": "8x8"})
    assert out["shape"].tolist() == ["4x4", "8x8", "8x8"]
