"""Instrumented, the compiled program is the user's program (issue 44): with
``instrument()`` active and its calls table recorded as under ``torch-nsight profile
--steps``, Dynamo compiles the same frames, recompiles and breaks graphs as often, and runs
the same compiled graphs in every step as the step alone, however the model is compiled.

The model is a tiny encoder-decoder shaped like Whisper (``encoder_decoder.py``), called
with keyword arguments; real Dynamo on the CPU, counted by its own compilation metrics
and counters."""

from __future__ import annotations

import dataclasses
import os
import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from capture_models import Ranges
from encoder_decoder import EncoderDecoder, batch
from torch._dynamo.utils import clear_compilation_metrics, counters, get_compilation_metrics

import torch_nsight
from torch_nsight.capture.calls import embed
from torch_nsight.capture.compiled.inductor import compiled_support
from torch_nsight.capture.compiled.tracker import TRACKER
from torch_nsight.capture.ranges.detect import NCU_VARIABLE
from torch_nsight.capture.script.step import reset_steps, step
from torch_nsight.environment import STEPS_ENV

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
STEPS = 3  # step 0 compiles, step 1 is measured (its calls recorded), step 2 runs after it


@dataclasses.dataclass(frozen=True)
class Compiled:
    """What Dynamo did over the steps."""

    recompiles: int
    graph_breaks: int
    graphs: int
    frames: tuple[str, ...]  # the frames it compiled, as file:function (with recompiles)
    runs: tuple[int, ...]  # compiled graphs run in each step


@pytest.fixture
def under_profile(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[dict[str, Any]]]:
    """As under ``torch-nsight profile --steps 1:2``: the calls tables carried into the
    report (by the instrumentation's calls carrier, over step 1)."""
    carried: list[dict[str, Any]] = []
    def carry(document: dict[str, Any]) -> bool:
        carried.append(document)
        return True

    monkeypatch.setattr(embed, "carry_calls", carry)
    monkeypatch.setenv(NCU_VARIABLE, "/opt/nvidia/nsight-compute/sections")
    monkeypatch.setenv(STEPS_ENV, "1:2")
    reset_steps()
    yield carried
    reset_steps()
    torch._dynamo.reset()


def _counted(backend: str, runs: list[int]) -> Callable[..., Any]:
    """``backend``, counting the runs of the graphs it compiles in ``runs[-1]``."""
    compile_graph = torch._dynamo.lookup_backend(backend)

    def counted(graph: torch.fx.GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
        compiled = compile_graph(graph, example_inputs)

        def run(*args: Any) -> Any:
            runs[-1] += 1
            return compiled(*args)

        return run

    return counted


Step = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def _compile_whole(model: EncoderDecoder, backend: Any) -> Step:
    compiled = torch.compile(model, backend=backend)
    return lambda x, labels: compiled(input_features=x, labels=labels)["loss"]


def _compile_whole_positional(model: EncoderDecoder, backend: Any) -> Step:
    compiled = torch.compile(model, backend=backend)
    return lambda x, labels: compiled(x, None, labels)["loss"]


def _compile_in_place(model: EncoderDecoder, backend: Any) -> Step:
    model.compile(backend=backend)
    return lambda x, labels: model(input_features=x, labels=labels)["loss"]


def _compile_submodule_in_place(model: EncoderDecoder, backend: Any) -> Step:
    model.decoder.compile(backend=backend)
    return lambda x, labels: model(input_features=x, labels=labels)["loss"]


def _compile_submodule_in_its_place(model: EncoderDecoder, backend: Any) -> Step:
    model.decoder = torch.compile(model.decoder, backend=backend)  # type: ignore[assignment]
    return lambda x, labels: model(input_features=x, labels=labels)["loss"]


def _compile_a_function(model: EncoderDecoder, backend: Any) -> Step:
    @torch.compile(backend=backend)
    def loss_of(x: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return model(input_features=x, labels=labels)["loss"]

    return loss_of


@dataclasses.dataclass(frozen=True)
class Case:
    compile: Callable[[EncoderDecoder, Any], Step]
    graph_break: bool = False  # the model breaks Dynamo's graph in every layer
    instrument_first: bool = True  # instrument() before compiling
    backend: str = "eager"  # aot_eager where AOTAutograd's runtime meets the calls recorder


CASES = {
    "torch.compile(model), keyword arguments": Case(_compile_whole, backend="aot_eager"),
    "torch.compile(model), positional arguments": Case(_compile_whole_positional),
    "torch.compile(model) before instrument()": Case(_compile_whole, instrument_first=False),
    "model.compile()": Case(_compile_in_place),
    "a submodule's compile()": Case(_compile_submodule_in_place),
    "torch.compile(submodule) in its place": Case(_compile_submodule_in_its_place),
    "a compiled function that calls the model": Case(_compile_a_function),
    "graph breaks of the model's own": Case(_compile_whole, graph_break=True,
                                             backend="aot_eager"),
    "graph breaks, a submodule's compile()": Case(_compile_submodule_in_place,
                                                   graph_break=True),
}


def _run(case: Case, backend: str, *, instrumented: bool) -> tuple[Compiled, int | None]:
    """The steps of ``case`` from a fresh Dynamo: what it did, and the calls the
    instrumentation carried (None without one)."""
    torch._dynamo.reset()
    counters.clear()
    clear_compilation_metrics()
    reset_steps()
    torch.manual_seed(0)
    model = EncoderDecoder(graph_break=case.graph_break)
    runs: list[int] = []
    handle = None
    if instrumented and case.instrument_first:
        handle = torch_nsight.instrument(model, enabled=True)
    loss_of = case.compile(model, _counted(backend, runs))
    if instrumented and not case.instrument_first:
        handle = torch_nsight.instrument(model, enabled=True)
    carrier = handle.carrier if handle is not None else None
    try:
        for index in range(STEPS):
            runs.append(0)
            with step(emitter=Ranges()):
                loss_of(*batch(index)).backward()
    finally:
        if handle is not None:
            handle.remove()
    metrics = get_compilation_metrics()
    return Compiled(
        recompiles=sum(m.recompile_reason is not None for m in metrics),
        graph_breaks=sum(counters["graph_break"].values()),
        graphs=counters["stats"]["unique_graphs"],
        frames=tuple(sorted(f"{Path(m.co_filename or '').name}:{m.co_name}" for m in metrics
                            if m.co_name)),  # (Inductor's cache misses count no frame)
        runs=tuple(runs)), (carrier.rows if carrier is not None else None)


@pytest.mark.parametrize("case", CASES)
def test_instrumented_dynamo_does_what_it_does_for_the_step_alone(
        case: str, under_profile: list[dict[str, Any]]) -> None:
    alone, _ = _run(CASES[case], CASES[case].backend, instrumented=False)
    instrumented, carried = _run(CASES[case], CASES[case].backend, instrumented=True)
    assert instrumented == alone
    assert alone.runs[-1] > 0 and len(set(alone.runs)) == 1  # every step ran compiled
    assert (alone.graph_breaks > 0) == CASES[case].graph_break  # the case is what it says
    # the measured step's calls table was recorded and carried, while it ran compiled
    assert len(under_profile) == 1 and carried == len(under_profile[0]["rows"]) > 0


@pytest.mark.slow
@pytest.mark.skipif(compiled_support() is not None,
                    reason=f"this torch cannot map compiled kernels: {compiled_support()}")
def test_with_inductor_too(under_profile: list[dict[str, Any]]) -> None:
    case = CASES["graph breaks, a submodule's compile()"]
    with torch._inductor.config.patch(compile_threads=1):
        alone, _ = _run(case, "inductor", instrumented=False)
        instrumented, carried = _run(case, "inductor", instrumented=True)
    assert instrumented == alone and alone.graph_breaks > 0
    # the table holds the ops run eagerly (the encoder's GEMMs), not those of Inductor's
    # graphs (the decoder layers' GEMMs: their kernel maps carry their FLOPs)
    (document,) = under_profile
    assert carried == len(document["rows"]) > 0
    gemms = {row["range_stack"][-1] for row in document["rows"]
             if row["op"] in ("mm", "addmm", "bmm") and row["range_stack"]}
    assert "encoder.layers.0.mlp.0" in gemms and "bwd:encoder.layers.0.mlp.0" in gemms
    assert not [stack for stack in gemms if stack.removeprefix("bwd:").startswith("decoder.")]
    # the kernel maps name the modules themselves, not the hops through the wrappers
    paths = {path for graph in TRACKER.graphs.values() if graph is not None
             for path in graph.modules}
    assert any(path.endswith("self_attn.q") for path in paths), paths
    assert not [path for path in paths if "forward" in path or "__self__" in path], paths


@pytest.mark.slow
def test_the_dry_run_compiles_what_the_script_alone_compiles(tmp_path: Path) -> None:
    # The script prints what Dynamo did after each step; the dry run stops it after the
    # chosen step 3. Step 3's lines must match, and the step's calls table be recorded.
    script = [sys.executable, str(HERE / "compiled_seq2seq.py")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(HERE)])}
    env.pop("TORCH_NSIGHT_INSTRUMENT", None)
    alone = subprocess.run(script, capture_output=True, text=True, cwd=tmp_path, env=env,
                           timeout=600)
    assert alone.returncode == 0, alone.stdout + alone.stderr
    profiled = subprocess.run(
        [sys.executable, "-m", "torch_nsight", "profile", "--dry-run", "--steps", "3:4",
         "--out", str(tmp_path / "out"), "--", *script],
        capture_output=True, text=True, cwd=tmp_path, env=env, timeout=600)
    output = profiled.stdout + profiled.stderr
    assert profiled.returncode == 0, output

    def step_lines(text: str) -> dict[str, str]:
        return dict(re.findall(r"^step (\d+): (instrumented \w+, .*)$", text, re.M))

    lines, profiled_lines = step_lines(alone.stdout), step_lines(output)
    assert lines["3"].startswith("instrumented False") and "graph breaks 4" in lines["3"]
    assert profiled_lines["3"] == lines["3"].replace("instrumented False", "instrumented True")
    assert "recompile_limit" not in output and "Traceback" not in output, output
    assert re.search(r"# step 3: ok in .*torch calls recorded", output), output
