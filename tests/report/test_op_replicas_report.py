"""Repeated op calls left out of ncu's replay (torch_nsight.report.op_replicas), on a training
step recorded twice on an H200 (tests/data/op_replicas, see its README row): with them left
out (61 kernels profiled) and with every launch profiled (``--no-replicate``, 193). Reading the
first gives every launch the second measured a row, in its own module and place."""

from __future__ import annotations

import logging
from pathlib import Path

import pandas as pd
import pytest

from tests.recorded import load_recorded, read_recorded
from torch_nsight import formats, naming
from torch_nsight.report.ncu_source import split_carried_replication
from torch_nsight.report.op_replicas import _checked, split_carried_op_replicas, with_op_replicas

DATA = Path(__file__).resolve().parents[1] / "data" / "op_replicas"


@pytest.fixture(scope="module")
def replicated() -> pd.DataFrame:
    return load_recorded(DATA / "replicated.ncu-rep.xz").kernels


@pytest.fixture(scope="module")
def measured() -> pd.DataFrame:
    return load_recorded(DATA / "measured.ncu-rep.xz").kernels


def _sequences(kernels: pd.DataFrame) -> dict[tuple[str, str], list[tuple[str, str]]]:
    return {key: list(zip(rows["kernel"], rows["grid"], strict=True))
            for key, rows in kernels.groupby(["module", "direction"], sort=False)}


def test_every_launch_has_a_row_in_its_own_module_and_place(replicated: pd.DataFrame,
                                                            measured: pd.DataFrame) -> None:
    copies = replicated["representative_index"].notna()
    assert copies.sum() > replicated["replicated_from"].isna().sum()  # most rows are copies
    # an identical sibling's rows are copied whole (their backward's gradient accumulation
    # too): the modules inside one are left to the sibling tests
    raw, _ = read_recorded(DATA / "replicated.ncu-rep.xz")
    _, groups = split_carried_replication(raw, DATA / "replicated.ncu-rep.xz")
    siblings = [r for group in groups for r in group["replicas"]]
    assert siblings
    mine, theirs = _sequences(replicated), _sequences(measured)
    compared = [key for key in mine
                if not any(naming.is_inside(key[0], sibling) for sibling in siblings)]
    assert len(compared) >= 30
    for key in compared:
        assert mine[key] == theirs.get(key), key
    assert set(theirs) == set(mine)


def test_a_copy_keeps_the_time_of_the_call_it_repeats(replicated: pd.DataFrame,
                                                      measured: pd.DataFrame) -> None:
    copies = replicated[replicated["representative_index"].notna()]
    measured_rows = replicated[replicated["replicated_from"].isna()].set_index("kernel_index")
    source = measured_rows.loc[copies["representative_index"].astype(int)]
    assert list(copies["duration_ns"]) == list(source["duration_ns"])
    assert list(copies["kernel"]) == list(source["kernel"])
    # the step's GPU time, every launch counted, against every launch measured
    total = replicated["duration_ns"].sum() / measured["duration_ns"].sum()
    assert abs(total - 1) < 0.05
    # the call numbers are not ranges of the user's
    assert not any(m.startswith(naming.CALL_PREFIX) for o in replicated["range_other"]
                   for m in o)


def test_without_the_list_the_profiled_rows_are_kept(caplog: pytest.LogCaptureFixture) -> None:
    raw, _ = read_recorded(DATA / "replicated.ncu-rep.xz")
    frame, document = split_carried_op_replicas(raw, DATA / "replicated.ncu-rep.xz")
    assert document is not None and len(frame) == len(raw) - 1  # its carrier kernel taken out
    with caplog.at_level(logging.WARNING):
        kept = with_op_replicas(frame, None, Path("r"))
    assert len(kept) == len(frame)
    assert "not the list of the calls ncu left out" in caplog.text
    caplog.clear()
    assert not any(m.startswith(naming.CALL_PREFIX) for o in kept["range_other"] for m in o)
    # a list beside rows that carry no call numbers (another report's) copies nothing, said
    other, _ = read_recorded(DATA / "measured.ncu-rep.xz")
    with caplog.at_level(logging.WARNING):
        assert with_op_replicas(other, document, Path("m")) is other
    assert "have no rows" in caplog.text


def test_a_damaged_list_is_refused() -> None:
    raw, _ = read_recorded(DATA / "replicated.ncu-rep.xz")
    _, document = split_carried_op_replicas(raw, DATA / "replicated.ncu-rep.xz")
    assert document is not None
    outside = {**document, "replicas": [[0, 0, len(document["stacks"])]]}
    with pytest.raises(formats.FormatError):
        _checked(outside)
    with pytest.raises(formats.FormatError):
        _checked({**document, "stacks": [[1, 2]]})


def test_a_list_beyond_the_steps_calls_is_refused_at_once() -> None:
    raw, _ = read_recorded(DATA / "replicated.ncu-rep.xz")
    _, document = split_carried_op_replicas(raw, DATA / "replicated.ncu-rep.xz")
    assert document is not None and document["calls"] == 114
    recorded = document["replicas"]
    # a million entries (the recorded ones over and over): more than the step's 114 calls
    enormous = {**document, "replicas": (recorded * (10**6 // len(recorded) + 1))[:10**6]}
    for damaged in (enormous, {**document, "replicas": [[-1, 5, 0]]},
                    {**document, "replicas": [[3, 2, 0]]},  # repeats a call after its place
                    {**document, "replicas": [[0, 114, 0]]},
                    {**document, "calls": "114"}):
        with pytest.raises(formats.FormatError):
            _checked(damaged)


def test_a_call_number_in_other_digits_is_no_number(caplog: pytest.LogCaptureFixture) -> None:
    raw, _ = read_recorded(DATA / "replicated.ncu-rep.xz")
    frame, document = split_carried_op_replicas(raw, DATA / "replicated.ncu-rep.xz")
    for digits in ("\N{SUPERSCRIPT TWO}", "\N{ARABIC-INDIC DIGIT THREE}"):
        odd = frame.assign(range_other=[
            tuple(naming.CALL_PREFIX + digits if m.startswith(naming.CALL_PREFIX) else m
                  for m in o) for o in frame["range_other"]])
        with caplog.at_level(logging.WARNING):
            kept = with_op_replicas(odd, document, Path("r"))
        assert len(kept) == len(frame)  # no row is any call's: nothing copied, said
        assert "have no rows" in caplog.text
