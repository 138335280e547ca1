"""The stage-neutral vocabulary: module-path helpers and the TF32 reading of settings."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch

from torch_nsight.capture.calls.settings import apply_settings, read_settings
from torch_nsight.vocabulary import (
    UNATTRIBUTED,
    ancestors,
    join_path,
    path_depth,
    path_leaf,
    path_parent,
    path_prefix,
    split_path,
    tf32_enabled,
)

PATH = "GPT2LMHeadModel/transformer/transformer.h.0/transformer.h.0.attn"


def test_a_module_path_splits_and_joins_back() -> None:
    assert join_path(split_path(PATH)) == PATH
    assert path_leaf(PATH) == "transformer.h.0.attn"
    assert path_depth(PATH) == 3 and path_depth("GPT2LMHeadModel") == 0
    assert path_parent("GPT2LMHeadModel") is None
    assert path_parent(PATH) == "GPT2LMHeadModel/transformer/transformer.h.0"
    assert ancestors(PATH)[0] == "GPT2LMHeadModel" and ancestors(PATH)[-1] == PATH
    assert len(ancestors(PATH)) == 4
    assert path_prefix(PATH, 1) == "GPT2LMHeadModel/transformer"
    assert path_prefix(UNATTRIBUTED, 0) == UNATTRIBUTED


@pytest.fixture
def legacy_tf32() -> Iterator[None]:
    """The legacy matmul switch flipped in this process; every switch it moves (the legacy
    one writes the fp32_precision tree too) restored afterwards."""
    before = read_settings()
    yield
    apply_settings(before)


def test_tf32_read_from_the_settings_this_torch_records(legacy_tf32: None) -> None:
    torch.backends.cuda.matmul.allow_tf32 = True
    assert tf32_enabled(read_settings(), "matmul") is True
    torch.backends.cuda.matmul.allow_tf32 = False
    assert tf32_enabled(read_settings(), "matmul") is False


def test_the_fp32_precision_tree_decides_before_the_legacy_switches() -> None:
    # a node set to "none" inherits its parent's value
    assert tf32_enabled({"cudnn.conv.fp32_precision": "none", "cudnn.fp32_precision": "tf32",
                         "cudnn.allow_tf32": False}, "conv") is True
    assert tf32_enabled({"cuda.matmul.fp32_precision": "ieee",
                         "float32_matmul_precision": "high"}, "matmul") is False
    # every node "none": the legacy switches decide
    assert tf32_enabled({"cuda.matmul.fp32_precision": "none", "fp32_precision": "none",
                         "float32_matmul_precision": "high"}, "matmul") is True
    assert tf32_enabled({}, "rnn") is None
    # the root of the tree decides over the legacy switches
    assert tf32_enabled({"fp32_precision": "ieee", "cuda.matmul.allow_tf32": True},
                        "matmul") is False
    # conv and rnn fall back to cuDNN's legacy switch
    assert tf32_enabled({"cudnn.rnn.fp32_precision": "none", "cudnn.allow_tf32": False},
                        "rnn") is False
