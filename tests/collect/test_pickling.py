"""Pickling factories that touch PyTorch's replaced modules (``torch.backends.cudnn``)."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import textwrap
import types
from collections.abc import Iterator
from pathlib import Path

import cloudpickle
import pytest
import torch
from torch import nn

from torch_nsight.collect.shared.pickling import dumps, loads

REPO = Path(__file__).resolve().parents[2]

FACTORIES = textwrap.dedent("""
    import torch
    from torch import nn
    from torch.backends import cudnn

    def make_with_imported_module():
        cudnn.benchmark = True
        return nn.Linear(4, 4)

    def make_through_torch():
        torch.backends.cudnn.deterministic = True
        return nn.Linear(4, 4)
""")


@pytest.fixture
def factories() -> types.ModuleType:
    """The factories defined in a module that cannot be imported: pickled by value, as
    cloudpickle pickles what ``__main__`` or a notebook defines."""
    module = types.ModuleType("factories_not_importable")
    exec(compile(FACTORIES, "<factories>", "exec"), module.__dict__)
    return module


@pytest.fixture(autouse=True)
def restore_cudnn_flags() -> Iterator[None]:
    saved = torch.backends.cudnn.benchmark, torch.backends.cudnn.deterministic
    yield
    torch.backends.cudnn.benchmark, torch.backends.cudnn.deterministic = saved


@pytest.mark.parametrize("name, flag", [("make_with_imported_module", "benchmark"),
                                        ("make_through_torch", "deterministic")])
def test_factories_touching_cudnn_round_trip(factories: types.ModuleType, name: str,
                                             flag: str) -> None:
    factory = getattr(factories, name)
    torch.backends.cudnn.benchmark = torch.backends.cudnn.deterministic = False
    loaded = loads(dumps(factory))
    assert loaded is not factory  # carried by value, not imported by name
    assert isinstance(loaded(), nn.Linear)
    assert getattr(torch.backends.cudnn, flag) is True


def test_replaced_modules_are_pickled_by_reference() -> None:
    for name in ("torch.backends.cudnn", "torch.backends", "torch.utils.deterministic"):
        module = sys.modules[name]
        assert type(module) is not types.ModuleType  # the case cloudpickle misses
        assert loads(dumps(module)) is module


def test_plain_objects_still_work() -> None:
    offset = 3
    assert loads(dumps(lambda x: x + offset))(2) == 5
    assert loads(dumps({"a": [1, 2.5, None]})) == {"a": [1, 2.5, None]}
    assert loads(dumps(os)) is os
    tensor = torch.arange(4.0)
    assert torch.equal(loads(dumps(tensor)), tensor)


def test_modules_registered_by_value_are_left_to_cloudpickle() -> None:
    module = types.ModuleType("registered_by_value_module")
    exec("VALUE = 41\ndef answer():\n    return VALUE + 1\n", module.__dict__)
    sys.modules[module.__name__] = module
    cloudpickle.register_pickle_by_value(module)
    try:
        data = dumps(module.answer)
        del sys.modules[module.__name__]  # as in a process that cannot import it
        assert loads(data)() == 42
    finally:
        sys.modules.pop(module.__name__, None)
        cloudpickle.unregister_pickle_by_value(module)


def test_loads_is_plain_pickle() -> None:
    assert loads(pickle.dumps([1, "two"])) == [1, "two"]


SCRIPT = textwrap.dedent("""
    import sys
    import torch
    from torch import nn
    from torch.backends import cudnn
    from torch_nsight.collect.shared.pickling import dumps

    class Tiny(nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = nn.Linear(3, 2)

        def forward(self, x):
            return self.proj(x).relu()

    def make():
        cudnn.benchmark = True
        return Tiny()

    with open(sys.argv[1], "wb") as handle:
        handle.write(dumps(make))
""")

LOADER = textwrap.dedent("""
    import sys
    import torch
    from torch_nsight.collect.shared.pickling import loads

    before = torch.backends.cudnn.benchmark
    with open(sys.argv[1], "rb") as handle:
        make = loads(handle.read())
    model = make()
    out = model(torch.randn(5, 3))
    print(before, torch.backends.cudnn.benchmark, type(model).__name__, tuple(out.shape))
""")


def run_python(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])])}
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, env=env,
                          cwd=cwd, timeout=300, check=False)


@pytest.mark.slow
def test_main_script_factory_loads_in_another_process(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    payload = tmp_path / "job.pkl"
    made = run_python([str(script), str(payload)], cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    loader = tmp_path / "loader.py"
    loader.write_text(LOADER)
    (tmp_path / "train.py").unlink()  # the loading process has nothing of the script
    loaded = run_python([str(loader), str(payload)], cwd=tmp_path)
    assert loaded.returncode == 0, loaded.stderr
    assert loaded.stdout.split() == ["False", "True", "Tiny", "(5,", "2)"]


class Tied(nn.Module):
    """Two layers sharing one weight (as a language model's head shares its embedding)."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(512, 64)
        self.head = nn.Linear(64, 512, bias=False)
        self.head.weight = self.embed.weight
        self.small = nn.Linear(4, 4)
        self.register_buffer("table", torch.randn(256, 128).to(torch.bfloat16))
        self.register_buffer("rows", self.table[8:16])  # a view of another buffer's storage


def test_large_tensors_travel_in_the_side_file_shared_ones_once(tmp_path: Path) -> None:
    model = Tied()
    with open(tmp_path / "tensors.bin", "wb") as side:
        data = dumps(model, side=side)
    inline = dumps(model)
    written = (tmp_path / "tensors.bin").stat().st_size
    # the tied weight once (512x64 fp32) and the bf16 buffer once (its view shares it);
    # the 4x4 layer is under the threshold and stays in the pickle
    assert written == 512 * 64 * 4 + 256 * 128 * 2
    assert len(data) < len(inline) - written + 4096
    loaded = loads(data)
    assert loaded.head.weight is loaded.embed.weight
    assert loaded.rows.untyped_storage().data_ptr() == loaded.table.untyped_storage().data_ptr()
    assert loaded.table.dtype == torch.bfloat16
    for name, value in model.state_dict().items():
        assert torch.equal(loaded.state_dict()[name], value), name
    # the loaded tensors own their memory: writing to them leaves the file alone
    loaded.embed.weight.data.zero_()
    assert torch.equal(loads(data).embed.weight, model.embed.weight)


def test_a_truncated_side_file_is_an_unpickling_error(tmp_path: Path) -> None:
    with open(tmp_path / "tensors.bin", "wb") as side:
        data = dumps(Tied(), side=side)
    with open(tmp_path / "tensors.bin", "r+b") as handle:
        handle.truncate(1000)
    with pytest.raises(pickle.UnpicklingError, match="ends before"):
        loads(data)


def test_recording_calls_does_not_import_dynamo() -> None:
    code = textwrap.dedent("""
        import sys
        import torch
        from torch_nsight.capture.calls.recorder import CallRecorder
        model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU())
        recorder = CallRecorder()
        with recorder.recording():
            model(torch.randn(2, 8))
        assert recorder.rows(), "nothing recorded"
        print("torch._dynamo" in sys.modules)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"
