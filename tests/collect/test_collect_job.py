"""The job file: labels, serialization round trip (closures, factories), permissions."""

from __future__ import annotations

import stat
import sys
import threading

import pytest
import torch

from torch_nsight.collect.shared import job as jobs


def test_shape_labels() -> None:
    assert jobs.label_shape((4, 128)) == "4x128"
    assert jobs.label_shape(torch.Size([2, 3, 4])) == "2x3x4"
    assert jobs.label_shape(7) == "7"
    assert jobs.label_shape({"batch": 4, "seq": (1, 2)}) == "batch:4,seq:1x2"
    assert jobs.label_shape("a=b;c/d") == "a:b,c|d"


def test_normalize_shapes() -> None:
    assert jobs.normalize_shapes([(1, 8), (2, 8)]) == [("1x8", (1, 8)), ("2x8", (2, 8))]
    assert jobs.normalize_shapes({"short": (1, 8)}) == [("short", (1, 8))]
    with pytest.raises(TypeError, match="single shape"):
        jobs.normalize_shapes([4, 128])
    with pytest.raises(TypeError, match="not a string"):
        jobs.normalize_shapes("4x128")
    with pytest.raises(ValueError, match="duplicate"):
        jobs.normalize_shapes([(1, 8), [1, 8]])
    with pytest.raises(ValueError, match="empty"):
        jobs.normalize_shapes([])
    with pytest.raises(ValueError, match="must not contain"):
        jobs.normalize_shapes({"a;b": (1,)})


def test_normalize_dtype() -> None:
    assert jobs.normalize_dtype(None) is None
    assert jobs.normalize_dtype("bf16") == "bfloat16"
    assert jobs.normalize_dtype(torch.float16) == "float16"
    with pytest.raises(ValueError):
        jobs.normalize_dtype(torch.int8)
    with pytest.raises(ValueError):
        jobs.normalize_dtype("int4")
    with pytest.raises(TypeError):
        jobs.normalize_dtype(3)


def test_round_trip_closures_and_factories_with_private_permissions() -> None:
    width = 5

    def factory() -> torch.nn.Module:  # a closure over a local
        return torch.nn.Linear(width, 2)

    job = jobs.Job(variants={"fac": factory, "mod": torch.nn.Linear(3, 3)},
                   shapes=[("1x5", (1, 5))], make_inputs=lambda s: torch.ones(s) * width,
                   backward=True, dtype="bfloat16")
    directory = jobs.make_private_dir()
    try:
        assignment = jobs.Assignment([0], "status", "result", ["/nonexistent/for-test"], "x")
        path = jobs.write_job(jobs.serialize_job(job), assignment, directory)
        assert stat.S_IMODE(directory.stat().st_mode) == 0o700
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        back_assignment, back = jobs.read_job(path)
    finally:
        for child in directory.iterdir():
            child.unlink()
        directory.rmdir()
        if "/nonexistent/for-test" in sys.path:
            sys.path.remove("/nonexistent/for-test")
    assert back_assignment.shape_indices == [0] and back_assignment.name == "x"
    assert back.variants["fac"]().in_features == 5
    assert back.variants["mod"].in_features == 3
    assert float(back.make_inputs((1, 2)).sum()) == 10.0
    assert back.backward is True and back.dtype == "bfloat16"
    described = jobs.describe_job(back)
    assert described["variants"]["mod"].startswith("module torch.nn.modules.linear.Linear")
    assert described["shapes"] == {"1x5": "(1, 5)"}


def test_unpicklable_job_says_what_to_do() -> None:
    class Holder(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lock = threading.Lock()

    with pytest.raises(TypeError, match="factory"):
        jobs.serialize_job(jobs.Job(variants={"": Holder()}, shapes=[("1", 1)]))


def test_read_job_refuses_other_files(tmp_path) -> None:
    import pickle

    path = tmp_path / "not-a-job"
    path.write_bytes(pickle.dumps({"hello": 1}))
    with pytest.raises(ValueError, match="not a torch_nsight job"):
        jobs.read_job(path)
