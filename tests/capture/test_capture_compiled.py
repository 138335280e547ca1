"""Compiled graphs keep their modules: Inductor's kernel map, one range per graph call, the
backward graph's root (real Inductor compiles on the CPU: C++ kernels stand in for Triton)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from capture_models import Recorder
from torch import nn

from torch_nsight import formats
from torch_nsight.calls_file import read_call_rows
from torch_nsight.capture.compiled.inductor import compiled_support
from torch_nsight.capture.compiled.records import module_path, parse_graph_source

pytestmark = pytest.mark.skipif(compiled_support() is not None,
                                reason=f"this torch cannot map compiled kernels: "
                                       f"{compiled_support()}")


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(32)
        self.fc = nn.Linear(32, 32)
        self.act = nn.GELU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.act(self.fc(self.norm(x)))


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.ModuleList([Block(), Block()])
        self.head = nn.Linear(32, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        return self.head(x)


@pytest.fixture
def fresh_compiler() -> Iterator[None]:
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    with torch._inductor.config.patch(compile_threads=1):
        yield
    torch._dynamo.reset()


def _maps(recorder: Recorder) -> dict[str, list[list]]:
    maps = {}
    for _, kind, message in recorder.events:
        if kind == "push" and message.startswith(formats.COMPILED_MAP_PREFIX):
            document = formats.unpack_message(message, formats.COMPILED_MAP_PREFIX,
                                              formats.COMPILED_MAP_KIND)
            maps[document["range"]] = document["launches"]
    return maps


def _ranges(recorder: Recorder) -> list[str]:
    return [m for _, kind, m in recorder.events if kind == "push" and m.startswith("compiled:")]


@pytest.mark.parametrize("text, expected", [
    ("L['self'].blocks[0].norm", "blocks.0.norm"),
    ("L['self']._modules['blocks']._modules['0'].fc", "blocks.0.fc"),
    ("getattr(L['self'].blocks, '1').act", "blocks.1.act"),
    ("L['fn'].0.norm", "0.norm"),
    ("L['self'].module().blocks.0.forward.module().norm", "blocks.0.norm"),
    ("L['self'].self_attn.forward.__self__.module().q", "self_attn.q"),
    ("L['self']", ""),
])
def test_module_paths_read_from_dynamo_sources(text: str, expected: str) -> None:
    assert module_path(text) == expected


@pytest.mark.slow
def test_whole_model_compile_maps_every_launch_to_its_module(
        recorder: Recorder, fresh_compiler: None) -> None:
    model = Net()
    handle = recorder.instrument(model)
    compiled = torch.compile(model)
    for _ in range(2):
        compiled(torch.randn(8, 32, requires_grad=True)).sum().backward()
    assert not torch._dynamo.utils.counters["graph_break"]
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == 1  # no recompile
    maps = _maps(recorder)
    forward = [launches for launches in maps.values() if "bwd:" not in launches[0][1][0]]
    backward = [launches for launches in maps.values() if "bwd:" in launches[0][1][0]]
    assert len(forward) == 1 and len(backward) == 1
    messages = set(handle.messages.values())
    for launches, prefix in ((forward[0], ""), (backward[0], "bwd:")):
        for _kernel, chain, fused, *_ in launches:
            assert chain[0] == prefix + "Net"  # the root, outermost first, as in eager mode
            assert all(m.startswith(prefix) and m[len(prefix):] in messages for m in chain)
            assert not fused or len(fused) > 1
    # each GEMM of the forward lands in its own Linear
    gemms = [chain[-1] for kernel, chain, *_ in forward[0] if "mm" in kernel]
    assert gemms == ["blocks.0.fc", "blocks.1.fc", "head"]
    # the first call of each graph (Triton's autotuning) is a warm-up; the second is inside
    # the graph's range, whose map is carried once (no measured step)
    assert sorted(_ranges(recorder)) == sorted(maps)
    assert [m for _, kind, m in recorder.events if kind == "push"].count("warmup") == 2


def test_per_block_compile_gives_each_call_its_block_and_backward_its_forward(
        recorder: Recorder, fresh_compiler: None) -> None:
    model = Net()
    recorder.instrument(model)
    for block in model.blocks:
        block.compile()
    # the first call of each graph is its warm-up: the blocks share one forward graph and
    # one backward graph (as without instrument()), so the first iteration has 2 warm-ups
    for _ in range(2):
        model(torch.randn(8, 32, requires_grad=True)).sum().backward()
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == 1
    pushes = [m for _, kind, m in recorder.events if kind == "push"]
    assert pushes.count("warmup") == 2
    roots = [m.split("@", 1)[1] for m in _ranges(recorder)]
    # forward blocks.0, blocks.1; backward in reverse order, each to its own block
    assert roots[-4:] == ["blocks.0", "blocks.1", "blocks.1", "blocks.0"]
    for name, launches in _maps(recorder).items():
        root = name.split("@", 1)[1]
        for _, chain, *_ in launches:
            assert chain[-1].removeprefix("bwd:").startswith(root)


@pytest.mark.slow
def test_the_wrapper_code_holds_the_launches_in_order(fresh_compiler: None) -> None:
    from torch._inductor.output_code import CompiledFxGraph

    recorder = Recorder()
    model = Net()
    recorder.instrument(model)
    sources = []
    call = CompiledFxGraph.__call__

    def keep(self: CompiledFxGraph, inputs: object) -> object:
        sources.append(self.source_code)
        return call(self, inputs)

    CompiledFxGraph.__call__ = keep  # the installed wrapper stays underneath
    try:
        torch.compile(model)(torch.randn(8, 32))
    finally:
        CompiledFxGraph.__call__ = call
        recorder.handles[0].remove()
    records = parse_graph_source(sources[0])
    calls = [line.strip().split("(")[0] for line in sources[0].splitlines()
             if line.strip().startswith(("cpp_fused", "extern_kernels."))
             and "async_compile" not in line]
    assert [r["k"] for r in records] == calls


def test_removing_the_last_instrumentation_restores_inductor(fresh_compiler: None) -> None:
    import torch._inductor.config as config

    before = (config.trace.provenance_tracking_level, config.post_grad_custom_post_pass)
    recorder = Recorder()
    recorder.instrument(Net())
    assert config.trace.provenance_tracking_level == 1
    recorder.handles[0].remove()
    assert (config.trace.provenance_tracking_level, config.post_grad_custom_post_pass) == before


def test_a_compiled_model_is_recorded_and_stays_compiled(
        recorder: Recorder, fresh_compiler: None, tmp_path: Path) -> None:
    # The calls recorder's dispatch mode tells Dynamo to ignore it: the blocks stay
    # compiled while the first iteration is recorded, and their Inductor graphs are left
    # out of the table (their kernels take their FLOPs from the kernel map).
    model = Net()
    recorder.instrument(model, record_calls=tmp_path / "run.calls.json")
    for block in model.blocks:
        block.compile()
    for _ in range(2):
        model(torch.randn(8, 32, requires_grad=True)).sum().backward()
    # both iterations ran compiled: the first warmed the blocks' graphs up (forward and
    # backward), every later call ran in its range
    pushes = [m for _, kind, m in recorder.events if kind == "push"]
    assert pushes.count("warmup") == 2 and len(_ranges(recorder)) == 6
    rows = read_call_rows(tmp_path / "run.calls.json")
    stacks = {(tuple(row["range_stack"]), row["op"]) for row in rows}
    assert (("Net", "head"), "addmm") in stacks and (("bwd:Net", "bwd:head"), "mm") in stacks
    assert not [s for s, _ in stacks if any(m.removeprefix("bwd:").startswith("blocks")
                                             for m in s)]


@pytest.mark.slow
def test_inductor_is_imported_only_when_the_model_compiles() -> None:
    # Importing Inductor costs seconds: an instrumented eager model must not pay it.
    import subprocess
    import sys

    code = ("import sys, torch, torch_nsight\n"
            "m = torch.nn.Linear(4, 4)\n"
            "h = torch_nsight.instrument(m, enabled=True)\n"
            "m(torch.randn(2, 4))\n"
            "print('torch._inductor.config' in sys.modules)\n"
            "torch.compile(m)(torch.randn(2, 4))\n"
            "import torch._inductor.config as config\n"
            "print(config.trace.provenance_tracking_level)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=300, check=True).stdout.split()
    assert out == ["False", "1"]  # not imported eagerly; switched on by torch.compile


class Attention(nn.Module):
    """Attention written with matmuls (the CPU's SDPA kernel has no FLOP formula), a
    Linear with bias and an MLP: GEMMs whose bias and epilogues Inductor fuses elsewhere."""

    def __init__(self) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(32)
        self.qkv = nn.Linear(32, 96)
        self.proj = nn.Linear(32, 32)
        self.fc1 = nn.Linear(32, 64)
        self.fc2 = nn.Linear(64, 32)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.qkv(self.norm(x)).view(2, 16, 3, 2, 16).permute(2, 0, 3, 1, 4)
        weights = torch.softmax(q @ k.transpose(-1, -2) / 4.0, dim=-1)
        x = x + self.proj((weights @ v).transpose(1, 2).reshape(2, 16, 32))
        return x + self.fc2(torch.relu(self.fc1(x)))


@pytest.mark.slow
def test_each_launch_carries_the_flops_flop_counter_counts(
        recorder: Recorder, fresh_compiler: None) -> None:
    from torch.utils.flop_counter import FlopCounterMode

    torch.manual_seed(0)
    model = Attention()
    x = torch.randn(2, 16, 32, requires_grad=True)
    with FlopCounterMode(display=False) as forward:
        out = model(x)
    with FlopCounterMode(display=False) as backward:
        out.sum().backward()
    recorder.instrument(model)
    compiled = torch.compile(model)
    for _ in range(2):
        compiled(torch.randn(2, 16, 32, requires_grad=True)).sum().backward()
    maps = list(_maps(recorder).values())
    assert len(maps) == 2
    for launches in maps:
        is_backward = launches[0][1][0].startswith("bwd:")
        expected = (backward if is_backward else forward).get_total_flops()
        assert expected > 0
        assert all(len(launch) == 5 for launch in launches)  # FLOPs and dtype on each
        assert sum(launch[3] for launch in launches) == expected
        # the GEMMs' FLOPs sit on the extern GEMM launches, never on the C++ kernels that
        # fused their bias, softmax or epilogue (those read the GEMM's value)
        for kernel, _, _, flops, dtype in launches:
            assert (flops > 0) == kernel.startswith("extern_kernels."), kernel
            assert dtype == ("float32" if flops else "")
