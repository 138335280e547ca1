"""The words of the hotspot tables, written by render from analysis' codes: on the recorded
Llama block, on a profile saved before the codes (its saved words shown as they were), and
on a profile saved and read back."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from tests.recorded import load_recorded
from torch_nsight.analyze import hotspots
from torch_nsight.profile import Profile
from torch_nsight.render.hotspot_words import (
    NEXT_STEP,
    next_step_words,
    word_hotspots,
    word_kernels,
)
from torch_nsight.render.reason_words import reason_words

DATA = Path(__file__).resolve().parents[1] / "data"


def test_each_reason_is_the_words_of_a_launch_of_its_site(profile: Profile) -> None:
    """A hotspot's reason is one of its launches' reasons, its code theirs, and its next
    step the words of its code."""
    top = profile.hotspots(n=50, fold=False)
    k = profile.kernels
    launches = set(zip(k["module_path"], k["kernel"], k["reason"], k["reason_code"],
                       strict=True))
    for row in top.itertuples():
        assert (row.module_path, row.kernel, row.reason, row.reason_code) in launches
        assert row.next_step == next_step_words(row.next_step_code, row._asdict())
        assert row.next_step.startswith(NEXT_STEP[row.next_step_code].split("{")[0])
    assert k["reason"].tolist() == [reason_words(r) for r in k.to_dict("records")]


def test_a_profile_saved_before_the_codes_shows_its_saved_words() -> None:
    saved = load_recorded(DATA / "profile_format1.parquet")
    assert "reason_code" not in saved.kernels
    top = saved.hotspots(n=50, fold=False)
    assert top["reason_code"].isna().all()
    assert set(top["reason"]) <= set(saved.kernels["reason"])
    assert word_kernels(saved.kernels) is saved.kernels  # its words are kept as they are
    assert top["next_step"].notna().all()


def test_saved_and_read_back_the_words_are_the_same(profile: Profile, tmp_path: Path) -> None:
    again = Profile.read(profile.save(tmp_path / "profile.parquet"))
    pd.testing.assert_frame_equal(again.hotspots(n=50), profile.hotspots(n=50))
    pd.testing.assert_frame_equal(word_hotspots(hotspots(again.kernels, n=50)),
                                  profile.hotspot_table(n=50))


def test_the_next_step_names_the_alternatives_the_ops_have() -> None:
    """On the recorded Llama training step, the attention backward limited by registers is
    told to try another SDPA backend, and elementwise kernels limited the same way are not;
    on the recorded ResNet-50 step, channels-last batch-norm kernels waiting on memory are
    not told to go channels-last (a layout no fact says is at fault)."""
    from pathlib import Path

    data = Path(__file__).resolve().parents[1] / "data"
    llama = load_recorded(data / "zoo_families" / "llama_train.ncu-rep.xz")
    hot = llama.hotspot_table(n=30)
    other = hot[hot["next_step_code"].map(lambda c: "{alternatives}" in NEXT_STEP.get(c, ""))]
    attention = other["aten_ops"].fillna("").str.contains("attention")
    assert attention.any() and (~attention).any()
    assert other.loc[attention, "next_step"].str.contains("SDPA backend").all()
    assert not other.loc[~attention, "next_step"].str.contains("SDPA").any()
    resnet = load_recorded(data / "latency" / "resnet50.ncu-rep.xz")
    hot = resnet.hotspot_table(n=30)
    waiting = hot[hot["kernel"].str.contains("channels_last")
                  & hot["next_step_code"].isin(["memory_latency", "waiting_warps"])]
    assert len(waiting) and not waiting["next_step"].str.contains("channels-last").any()
