"""The fix specs the command writes and the script reads (TORCH_NSIGHT_APPLY)."""

from __future__ import annotations

import pytest

from torch_nsight.verify_exchange import FIX_OPTIONS, FixSpec, format_fixes, parse_fixes


def test_the_compact_form_and_json_read_alike() -> None:
    compact = parse_fixes("tf32; compile@layers.*.mlp:mode=reduce-overhead,fullgraph=true;"
                          "pad_linear@lm_head:multiple=64")
    assert compact == [FixSpec("tf32"),
                       FixSpec("compile", "layers.*.mlp",
                               {"mode": "reduce-overhead", "fullgraph": True}),
                       FixSpec("pad_linear", "lm_head", {"multiple": 64})]
    assert parse_fixes(format_fixes(compact)) == compact
    assert parse_fixes('{"fix": "channels_last"}') == [FixSpec("channels_last")]
    assert [parse_fixes(s.describe())[0] for s in compact] == compact


@pytest.mark.parametrize(("text", "message"), [
    ("fuse", "unknown fix 'fuse'"),
    ("compile:mode=fast", "mode must be one of"),
    ("compile:speed=1", "unknown option 'speed'"),
    ("pad_linear:multiple=1", "multiple must be >= 2"),
    ("pad_linear:multiple=x", "multiple must be int"),
    ("sdpa_backend@attn", "needs option backend"),
    ("sdpa_backend:backend=fast", "backend must be one of"),
    ("cast:dtype=bogus", "dtype must be one of bfloat16, float16"),
    ("tf32:on", "is not KEY=VALUE"),
    ("[1]", "must be an object"),
    ("[{", "not valid JSON"),
])
def test_a_bad_fix_is_refused_naming_what_is_wrong(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_fixes(text)


def test_the_cast_dtypes_are_those_the_switch_takes() -> None:
    from torch_nsight.capture.fixes.switches import _HALF
    from torch_nsight.vocabulary import HALF_DTYPES

    assert set(HALF_DTYPES) == set(_HALF)


def test_every_kind_has_a_switch_in_the_script() -> None:
    from torch_nsight.capture.fixes.switches import SWITCHES

    assert set(SWITCHES) == set(FIX_OPTIONS)
