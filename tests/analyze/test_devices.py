"""Peaks of known GPUs are looked up by the device's whole name (issue 45): a GPU named
"RTX A1000 6" once matched the A100's entry (a part of its name), which gave its kernels an
A100's ceilings, a made-up gain and 18 kernels "above roof". The names of every recorded
report (tests/data/golden/*/profile.json lists them) still find their entry; names that
only contain a known one find none; a trace (tests/data/timeline_train) renamed so takes
no peaks from the table."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

import torch_nsight
from torch_nsight.analyze.devices import KNOWN_GPUS, capability_of, known_gpu

DATA = Path(__file__).resolve().parents[1] / "data"


def _recorded_names() -> set[str]:
    return {name for path in (DATA / "golden").glob("*/profile.json")
            for name in json.loads(path.read_text()).get("gpus") or ()}


def test_the_recorded_names_match_their_entry() -> None:
    names = _recorded_names()
    assert {"NVIDIA H200", "NVIDIA H100 80GB HBM3"} <= names
    for name in names:
        gpu = known_gpu(name)
        assert gpu is not None and name in gpu.names, name
    assert known_gpu("NVIDIA H100 80GB HBM3").dram_bytes_per_s == 3.35e12  # type: ignore[union-attr]
    assert known_gpu("NVIDIA H200").dram_bytes_per_s == 4.8e12  # type: ignore[union-attr]


@pytest.mark.parametrize("name", ["NVIDIA H200", "nvidia h200", " NVIDIA  H200 ", "H200",
                                  "A100-SXM4-40GB"])
def test_case_spaces_and_the_vendor_word_aside(name: str) -> None:
    assert known_gpu(name) is not None


@pytest.mark.parametrize("name", [
    "RTX A1000 6", "NVIDIA RTX A1000 6GB Laptop GPU", "NVIDIA A100X", "NVIDIA H1000",
    "NVIDIA H200 NVL", "NVIDIA GH200 480GB", "NVIDIA H100 80GB HBM3 (modified)",
    "NVIDIA A10G", "NVIDIA L4 Tensor", "NVIDIA H200\x1b[2J", "", "NVIDIA"])
def test_a_name_that_only_contains_a_known_one_matches_none(name: str) -> None:
    assert known_gpu(name) is None


def test_every_entry_is_found_by_each_of_its_names() -> None:
    for gpu in KNOWN_GPUS:
        for name in gpu.names:
            assert known_gpu(name) is gpu
    assert capability_of("RTX A1000 6") is None


@pytest.mark.parametrize(("name", "basis"), [("NVIDIA H200", "table"), ("RTX A1000 6", None)])
def test_a_trace_of_an_unknown_gpu_takes_no_peaks(name: str, basis: str | None,
                                                 tmp_path: Path) -> None:
    with gzip.open(DATA / "timeline_train" / "trace-0.json.gz", "rt") as handle:
        document = json.load(handle)
    for device in document["deviceProperties"]:
        device["name"] = name
    path = tmp_path / "trace.json"
    path.write_text(json.dumps(document))
    kernels = torch_nsight.load(path, cache=False).kernels
    assert set(kernels["gpu"]) == {name}
    assert set(kernels["peak_basis"].map(lambda b: b if isinstance(b, str) else None)) == {basis}
    assert not kernels["above_roof"].any()
    if basis is None:
        assert kernels["peak_flops_per_s"].isna().all()
        assert kernels["headroom_ns"].isna().all() or (kernels["headroom_ns"].fillna(0) == 0).all()
