"""The handle: remove(), context manager, double instrumentation, argument checks, compile,
enabling from the environment, and the leak check of tests/conftest.py."""

from __future__ import annotations

import copy
import io
import logging
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from capture_models import STACK_FORWARD, Recorder, Stack
from torch import nn

import torch_nsight
from torch_nsight.capture import (
    Instrumentation,
    RecordingEmitter,
    active_instrumentations,
    instrument,
)
from torch_nsight.environment import INSTRUMENT_ENV

REPO = Path(__file__).resolve().parents[2]
HOOK_DICTS = (
    "_forward_hooks", "_forward_hooks_with_kwargs", "_forward_hooks_always_called",
    "_forward_pre_hooks", "_forward_pre_hooks_with_kwargs",
    "_backward_hooks", "_backward_pre_hooks",
)


def hook_state(model: nn.Module) -> dict[str, object]:
    return {
        f"{name}.{attr}": dict(getattr(module, attr))
        for name, module in model.named_modules() for attr in HOOK_DICTS
    } | {f"{name}._is_full_backward_hook": module._is_full_backward_hook
         for name, module in model.named_modules()
    } | {f"{name}.forward": module.__dict__.get("forward")
         for name, module in model.named_modules()}


def test_remove_restores_the_model_exactly(recorder: Recorder) -> None:
    model = Stack()
    user_hook = model.inp.register_forward_hook(lambda *args: None)
    model.layers[0].register_full_backward_hook(lambda *args: None)
    before = hook_state(model)
    handle = recorder.instrument(model, ops=True)
    assert hook_state(model) != before
    # no PyTorch module hook: only each module's instance attribute `forward` changes
    changed = {key for key in before if hook_state(model)[key] != before[key]}
    assert changed == {f"{name}.forward" for name, _ in model.named_modules()}
    assert handle.active and handle in active_instrumentations()
    handle.remove()
    assert hook_state(model) == before
    assert not handle.active and handle not in active_instrumentations()
    handle.remove()  # twice is fine
    model(torch.randn(3, 4)).sum().backward()
    assert recorder.events == []
    user_hook.remove()


def test_saved_and_copied_models_are_not_instrumented(recorder: Recorder) -> None:
    model = Stack()
    recorder.instrument(model)
    buffer = io.BytesIO()
    torch.save(model, buffer)  # whole-model checkpoints work while instrumented
    buffer.seek(0)
    copies = [torch.load(buffer, weights_only=False), copy.deepcopy(model)]
    for clone in copies:
        clone(torch.randn(3, 4)).sum().backward()
    assert recorder.events == []
    with torch.no_grad():
        model(torch.randn(3, 4))
    assert recorder.lines() == STACK_FORWARD


def test_context_manager(recorder: Recorder) -> None:
    model = Stack()
    before = hook_state(model)
    with instrument(model, enabled=True, emitter=recorder.emitter) as handle:
        assert isinstance(handle, Instrumentation) and handle.active
        with torch.no_grad():
            model(torch.randn(3, 4))
    assert hook_state(model) == before
    assert recorder.lines() == STACK_FORWARD


def test_context_manager_removes_hooks_on_error() -> None:
    model = Stack()
    before = hook_state(model)
    with pytest.raises(KeyError), instrument(model, enabled=True, emitter=RecordingEmitter()):
        raise KeyError("user error")
    assert hook_state(model) == before


def test_instrumenting_twice_does_not_double_ranges(recorder: Recorder) -> None:
    model = Stack()
    first = recorder.instrument(model, backward=False)
    with pytest.warns(UserWarning, match="already instrumented"):
        second = recorder.instrument(model, backward=False)
    with pytest.warns(UserWarning, match="already instrumented"):
        inner = recorder.instrument(model.layers[0])
    assert first.active and not second.active and not inner.active
    assert "already instrumented" in second.reason
    second.remove()  # a no-op: the first instrumentation stays
    with torch.no_grad():
        model(torch.randn(3, 4))
    assert recorder.lines() == STACK_FORWARD
    first.remove()
    assert recorder.instrument(model, backward=False).active  # allowed again once removed


def test_the_already_instrumented_warnings_point_at_the_caller() -> None:
    model = Stack()
    with instrument(model.layers[1], enabled=True, emitter=RecordingEmitter()):
        with pytest.warns(UserWarning, match="submodule") as taken:
            handle = instrument(model, enabled=True, emitter=RecordingEmitter())
        with handle, pytest.warns(UserWarning, match="not instrumenting it again") as again:
            instrument(model, enabled=True, emitter=RecordingEmitter())
    assert [w.filename for w in (*taken, *again)] == [__file__, __file__]


def test_instrumenting_a_parent_skips_already_instrumented_children(recorder: Recorder) -> None:
    model = Stack()
    child = recorder.instrument(model.layers[1], backward=False)
    with pytest.warns(UserWarning, match="already instrumented"):
        parent = recorder.instrument(model, backward=False)
    assert not set(parent.names) & {"layers.1", "layers.1.gate"}
    with torch.no_grad():
        model(torch.randn(3, 4))
    # layers.1 keeps the names given by its own instrumentation, once
    assert recorder.lines()[7:] == ["  MLP", "    gate", "    act", "    up", "    down"]
    assert child.active


@pytest.mark.parametrize(
    ("options", "error", "argument"),
    [
        ({"model": "not a module"}, TypeError, "model"),
        ({"model": nn.Linear}, TypeError, "model"),
        ({"depth": -1}, ValueError, "depth"),
        ({"depth": "2"}, TypeError, "depth"),
        ({"depth": True}, TypeError, "depth"),
        ({"include": 3}, TypeError, "include"),
        ({"exclude": [nn.Linear, 3.0]}, TypeError, "exclude"),
        ({"ops": 1.5}, TypeError, "ops"),
        ({"backward": "yes"}, TypeError, "backward"),
        ({"enabled": "yes"}, TypeError, "enabled"),
        ({"emitter": object()}, TypeError, "emitter"),
    ],
)
def test_bad_arguments_name_the_argument(options: dict, error: type, argument: str) -> None:
    options = {"model": Stack(), "enabled": True, **options}
    with pytest.raises(error, match=argument):
        instrument(**options)
    assert not active_instrumentations()


def test_compiled_model_runs_and_gives_the_same_results(recorder: Recorder) -> None:
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    # reset() keeps the metrics of earlier tests' compiles (a backward compiled late)
    torch._dynamo.utils.clear_compilation_metrics()
    model, reference = Stack(), Stack()
    reference.load_state_dict(model.state_dict())
    recorder.instrument(model, ops=True)
    compiled = torch.compile(model, backend="eager")
    x = torch.randn(3, 4)
    out = compiled(x)
    torch.testing.assert_close(out, reference(x))
    out.sum().backward()
    reference(x).sum().backward()
    for got, want in zip(model.parameters(), reference.parameters(), strict=True):
        torch.testing.assert_close(got.grad, want.grad)
    # Dynamo compiled the model's own forward, not the wrapper: the root's ranges are
    # around the compiled region (as a per-block compile's outer modules), none inside it
    # (no op range either), and no graph break
    assert recorder.lines() == ["Stack", "bwd:Stack"]
    assert not torch._dynamo.utils.counters["graph_break"]
    frames = {m.co_name for m in torch._dynamo.utils.get_compilation_metrics()}
    assert frames == {"forward"}, frames
    # the eager model is still instrumented
    recorder.clear()
    model(x).sum().backward()
    modules = [line for line in recorder.lines() if "op:" not in line]
    assert modules[: len(STACK_FORWARD)] == STACK_FORWARD
    assert "    op:linear" in recorder.lines()
    torch._dynamo.reset()


def test_compiled_submodule_inside_an_instrumented_model(recorder: Recorder) -> None:
    # The op-naming mode is active around the compiled region; Dynamo must not trace it.
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    model = Stack()
    x = torch.randn(3, 4)
    expected = model(x)
    model.layers[0] = torch.compile(model.layers[0], backend="eager")
    recorder.instrument(model, ops=True)
    out = model(x)
    out.sum().backward()
    torch.testing.assert_close(out, expected)
    assert not torch._dynamo.utils.counters["graph_break"]
    assert "  layers.0" in recorder.lines()
    torch._dynamo.reset()


PROFILER_VARIABLES = (
    "NVTX_INJECTION64_PATH", "NVTX_INJECTION32_PATH", "CUDA_INJECTION64_PATH",
    "NV_NSIGHT_INJECTION_TRANSPORT_TYPE", "NV_TPS_LAUNCH_TOKEN",
    "NV_COMPUTE_PROFILER_PERFWORKS_DIR",
)


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in list(os.environ):
        if name in PROFILER_VARIABLES or name == INSTRUMENT_ENV or name.startswith(
            ("NVIDIA_PROCESS_INJECTION_", "NV_NSIGHT_INJECTION_", "NSYS_")
        ):
            monkeypatch.delenv(name)
    return monkeypatch


def test_not_profiled_installs_nothing(
    clean_env: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    model = Stack()
    before = hook_state(model)
    with caplog.at_level(logging.INFO, logger="torch_nsight"):
        handle = instrument(model, emitter=RecordingEmitter())
    assert not handle.active
    assert "no NVIDIA profiler detected" in handle.reason
    assert handle.reason in caplog.text
    assert hook_state(model) == before
    handle.remove()
    with handle:
        pass


@pytest.mark.parametrize(
    ("env", "enabled", "active"),
    [
        ({"NSYS_PROFILING_SESSION_ID": "1"}, None, True),
        ({"NV_TPS_LAUNCH_TOKEN": "x"}, None, True),
        ({INSTRUMENT_ENV: "1"}, None, True),
        ({INSTRUMENT_ENV: "0", "NVTX_INJECTION64_PATH": "/x/libToolsInjection64.so"}, None, False),
        ({INSTRUMENT_ENV: "0"}, True, True),
        ({INSTRUMENT_ENV: "1"}, False, False),
        ({"NV_TPS_LAUNCH_TOKEN": "x"}, False, False),
    ],
)
def test_environment_decides_when_enabled_is_none(
    clean_env: pytest.MonkeyPatch, env: dict, enabled: bool | None, active: bool
) -> None:
    for name, value in env.items():
        clean_env.setenv(name, value)
    model = Stack()
    recorder = RecordingEmitter()
    with instrument(model, enabled=enabled, emitter=recorder) as handle:
        assert handle.active is active
        with torch.no_grad():
            model(torch.randn(3, 4))
    assert bool(recorder.events) is active


def test_default_emitter_is_nvtx(clean_env: pytest.MonkeyPatch) -> None:
    # No NVTX tool is attached here, so the nvtx package's ranges do nothing; this runs the
    # real default emitter end to end.
    model = Stack()
    with instrument(model, enabled=True, ops=True) as handle:
        assert handle.active
        model(torch.randn(3, 4)).sum().backward()


def test_public_names() -> None:
    assert torch_nsight.instrument is instrument
    assert torch_nsight.Instrumentation is Instrumentation


def run_python(code: str, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    # Keep the caller's own path entries (the GPU machine installs nvtx with --target).
    paths = [str(REPO), str(REPO / "tests"), *filter(None, [os.environ.get("PYTHONPATH")])]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}
    return subprocess.run([sys.executable, *args, "-c", code] if not args else
                          [sys.executable, *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=120)


@pytest.mark.slow
def test_capture_never_imports_pandas(tmp_path: Path) -> None:
    code = ("import sys, torch_nsight, torch_nsight.capture; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'pandas'))")
    done = run_python(code, tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


@pytest.mark.slow
def test_leak_check_fails_a_test_that_leaves_hooks(tmp_path: Path) -> None:
    (tmp_path / "test_leaky.py").write_text(textwrap.dedent("""
        import torch
        import torch_nsight

        MODEL = torch.nn.Linear(2, 2)

        def test_leaky():
            torch_nsight.instrument(MODEL, enabled=True)

        def test_tidy():
            with torch_nsight.instrument(torch.nn.Linear(2, 2), enabled=True):
                pass
    """))
    done = run_python("", tmp_path, "-m", "pytest", "-q", "-p", "conftest", "-p",
                      "no:cacheprovider", "--rootdir", str(tmp_path), "test_leaky.py")
    # the leaky test's own body passes; the check fails it at teardown
    assert "2 passed, 1 error" in done.stdout, done.stdout + done.stderr
    assert "ERROR test_leaky.py::test_leaky - Failed: test left torch_nsight hooks" in done.stdout
    assert "<Instrumentation of Linear, 1 modules>" in done.stdout


def test_forward_replaced_by_another_tool(
    recorder: Recorder, caplog: pytest.LogCaptureFixture
) -> None:
    # Before instrument(): wrapped and put back on remove(). After: left in place, and the
    # instrumentation inside it only calls through.
    model = Stack()
    calls: list[str] = []

    def patched(x: torch.Tensor, original=model.inp.forward) -> torch.Tensor:
        calls.append("patched")
        return original(x)

    model.inp.forward = patched
    handle = recorder.instrument(model, backward=False)
    theirs = model.forward

    def later(x: torch.Tensor) -> torch.Tensor:
        calls.append("later")
        return theirs(x)

    model.forward = later
    with torch.no_grad():
        model(torch.randn(3, 4))
    assert recorder.lines() == STACK_FORWARD and calls == ["later", "patched"]
    with caplog.at_level(logging.WARNING, logger="torch_nsight"):
        handle.remove()
    assert "Stack.forward was replaced after instrument()" in caplog.text
    assert model.inp.__dict__["forward"] is patched and model.__dict__["forward"] is later
    recorder.clear()
    with torch.no_grad():
        model(torch.randn(3, 4))
    assert recorder.events == [] and calls[-2:] == ["later", "patched"]


def test_a_removed_handle_says_it_was_removed(recorder: Recorder) -> None:
    with recorder.instrument(Stack()) as handle:
        assert "modules" in repr(handle)
    assert repr(handle).endswith("inactive: removed>")
