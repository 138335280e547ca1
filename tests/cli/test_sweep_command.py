"""torch-nsight sweep TARGET: the dry run on CPU, where the model is imported (the child
only), and usage errors."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import torch_nsight
from torch_nsight.cli.outputs import UsageError
from torch_nsight.cli.sweep import parse_shapes
from torch_nsight.collect.shared.job import Target
from torch_nsight.collect.shared.timing import describe

from .conftest import imported_after, run_main

ROOT = Path(__file__).resolve().parents[2]

MODEL_FILE = """
import os
from pathlib import Path

import torch

Path({marker!r}).open("a").write(f"{{os.getpid()}}\\n")  # who imported this file


def make():
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 8))


def inputs(shape):
    return torch.ones(shape)
"""


def cli(*args: str, cwd: Path) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen([sys.executable, "-m", "torch_nsight", "sweep", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=cwd, env=env)


@pytest.mark.slow
def test_a_file_target_is_imported_by_the_child_only(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    marker = tmp_path / "imported_by.txt"
    (tmp_path / "model.py").write_text(MODEL_FILE.format(marker=str(marker)))
    # the command's own process imports neither the file nor torch: the child does both
    found = imported_after(["sweep", "model.py:make", "--shapes", "4x16,2x3x16", "--dry-run",
                            "--backward", "-o", "out"], tmp_path)
    assert found["status"] == 0, found["err"]
    assert found["out"].splitlines() == ["4x16: ok (outputs (4, 8) float32)",
                                         "2x3x16: ok (outputs (2, 3, 8) float32)"]
    assert "torch" not in found["heavy"] and "torch_nsight.collect" in found["heavy"]
    # into a pipe, each shape's phases as they start (a terminal shows them on the bar)
    said = [line for line in found["err"].splitlines() if line.startswith("torch_nsight sweep: ")]
    assert said[:2] == ["torch_nsight sweep: 4x16 (warm-up)", "torch_nsight sweep: 4x16 (calls table)"]
    assert "torch_nsight sweep: 2x3x16 (iterations)" in said
    importers = {int(line) for line in marker.read_text().split()}
    assert importers and found["pid"] not in importers
    # where the time went, on standard error, as the saved profile records it, with the
    # settings the child ran with (the command had none of its own to give it)
    took = [line for line in found["err"].replace("\n  ", " ").splitlines()  # wrapped
            if line.startswith("sweep took ")]
    saved = torch_nsight.load(tmp_path / "out").meta
    assert took == [f"sweep took {describe(saved.sweeps[0].timing)}"]
    assert saved.settings["default_dtype"] == "float32"
    # a dry run's folder holds no kernel: the roofline says so, without "0 metrics missing"
    status, _, err = run_main(["report", "out", "--plot", "p.png"], tmp_path, monkeypatch,
                              capsys)
    assert status == 1 and "the profile holds no kernel (a dry run profiles nothing" in err
    assert "metrics missing" not in err and not (tmp_path / "p.png").exists()
    # a dry run's folder holds no profile: the next run replaces it
    status, _, err = run_main(["sweep", "model.py:make", "--shapes", "4x16", "--dry-run",
                               "-o", "out"], tmp_path, monkeypatch, capsys)
    assert status == 0, err
    # without -o a dry run keeps nothing
    status, _, err = run_main(["sweep", "model.py:make", "--shapes", "4x16", "--dry-run"],
                              tmp_path, monkeypatch, capsys)
    assert status == 0, err
    assert not (tmp_path / "torch_nsight_sweep").exists()
    # sweep() takes the same names: the file (model and inputs) is run by the child alone
    before = marker.read_text()
    profile = torch_nsight.sweep("model.py:make", [(2, 16)], make_inputs="model.py:inputs",
                                 profiler=None, quiet=True)
    assert [r["status"] for r in profile.results] == ["ok"]
    assert marker.read_text() != before and str(os.getpid()) not in marker.read_text().split()
    # a folder holding a profiled sweep (the recorded one) is kept without --force
    shutil.copytree(ROOT / "tests" / "data" / "sweep_stack", tmp_path / "kept")
    status, _, err = run_main(["sweep", "model.py:make", "--shapes", "4x16", "--dry-run",
                               "-o", "kept"], tmp_path, monkeypatch, capsys)
    assert status == 1 and "--force" in err


@pytest.mark.parametrize(("args", "message"), [
    (["missing.py:make", "--shapes", "4x16"], "does not exist"),
    (["model.py", "--shapes", "4x16"], "package.module:factory"),
    (["pkg.mod:make", "--shapes", "4xq"], "not a shape"),
])
def test_usage_errors_are_one_line(tmp_path: Path, args: list[str], message: str,
                                   monkeypatch: pytest.MonkeyPatch,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    status, _, err = run_main(["sweep", *args, "--dry-run"], tmp_path, monkeypatch, capsys)
    assert status == 1
    (line,) = err.strip().splitlines()
    assert line.startswith("torch-nsight: error:") and message in line


def test_shapes_and_targets(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert parse_shapes("1x512,4x512x1024") == [(1, 512), (4, 512, 1024)]
    with pytest.raises(UsageError):
        parse_shapes("1x0")
    factory = Target("tests.collect.models:Stack")
    assert factory.resolve().__name__ == "Stack"
    with pytest.raises(ImportError, match="no callable"):
        Target("tests.collect.models:nothing_here").resolve()
    with pytest.raises(ValueError, match="does not exist"):
        Target("missing.py:make")
    # a name the file plainly does not define fails here, without running the file
    model = tmp_path / "model.py"
    model.write_text(MODEL_FILE.format(marker=str(tmp_path / "ran.txt")))
    monkeypatch.chdir(tmp_path)  # a relative file is named by its absolute path: the
    assert Target("model.py:inputs").spec == f"{model}:inputs"  # child may start elsewhere
    with pytest.raises(ValueError, match=r"^--inputs 'model.py:input': model.py defines no "):
        Target("model.py:input", role="--inputs")
    assert not (tmp_path / "ran.txt").exists()
    # names a file binds at run time are given the benefit of the doubt
    for source in ("def __getattr__(name):\n    return lambda: name\n",
                   "import sys\nsetattr(sys.modules[__name__], 'make', print)\n",
                   "def register():\n    globals()['make'] = print\nregister()\n"):
        (tmp_path / "dynamic.py").write_text(source)
        Target("dynamic.py:make")
    # a file runs once per process, and again once it has changed (a notebook's edits)
    (tmp_path / "edited.py").write_text("def make():\n    return 1\n")
    named = Target("edited.py:make")
    assert named() == 1 and named.resolve() is named.resolve()
    (tmp_path / "edited.py").write_text("def make():\n    return 22\n")
    assert named() == 22
    # what the child says when a name does not resolve names the argument
    with pytest.raises(ImportError, match="make_inputs 'tests.collect.models:nope': .* no call"):
        Target("tests.collect.models:nope", role="make_inputs").resolve()
    with pytest.raises(ImportError, match="model 'no_such_pkg.mod:make': No module named"):
        Target("no_such_pkg.mod:make", role="model").resolve()


@pytest.mark.parametrize(("model", "make_inputs", "error", "message"), [
    ("model.py", None, ValueError, r"model 'model.py': expected package.module"),
    ({"a": "missing.py:make"}, None, ValueError, r"model\['a'\] 'missing.py:make': .* does not"),
    (3, None, TypeError, "nn.Module, a zero-argument factory or its name"),
    ("pkg.mod:make", "inputs", ValueError, "make_inputs 'inputs': expected"),
    ("pkg.mod:make", 42, TypeError, "make_inputs must be .*, got int"),
])
def test_sweep_says_which_name_is_wrong(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                        model: object, make_inputs: object,
                                        error: type[Exception], message: str) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(error, match=message):
        torch_nsight.sweep(model, [(2, 16)], make_inputs=make_inputs, profiler=None)


@pytest.mark.slow
def test_a_dry_run_says_why_a_shape_failed_and_exits_1(tmp_path: Path) -> None:
    (tmp_path / "model.py").write_text(MODEL_FILE.format(marker=str(tmp_path / "m.txt")))
    # 4x12 does not fit Linear(16, 32); 4x16 does
    proc = cli("model.py:make", "--shapes", "4x16,4x12", "--dry-run", "-o", "out",
               cwd=tmp_path)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 1, err
    ok, failed = out.splitlines()
    assert ok == "4x16: ok (outputs (4, 8) float32)"
    assert failed.startswith("4x12: failed: RuntimeError:") and "shapes cannot be" in failed
    # the child's traceback keeps the frames nearest the error
    result = torch_nsight.load(tmp_path / "out").results[1]
    assert result["traceback"].rstrip().endswith(failed.split(": ", 2)[2])
    assert "F.linear" in result["traceback"] or "linear" in result["traceback"]


SLOW_FILE = """
import time
import torch

def make():
    return torch.nn.Linear(16, 8)

def inputs(shape):
    if shape[0] == 3:  # the second shape hangs until it is stopped
        time.sleep(300)
    return torch.randn(shape)
"""


def _wait_for_first_shape(status: Path, proc: subprocess.Popen[str]) -> int:
    """Wait until the child finished the first shape; return the child's pid."""
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()
        events = ([json.loads(line) for line in status.read_text().splitlines() if line]
                  if status.is_file() else [])
        if any(e["event"] == "item_end" and e["index"] == 0 for e in events) and any(
                e["event"] == "item_start" and e["index"] == 1 for e in events):
            return next(e["pid"] for e in events if e["event"] == "start")
        time.sleep(0.2)
    raise AssertionError("the first shape never finished")


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_an_interrupted_sweep_keeps_its_finished_shapes(tmp_path: Path, signum: int) -> None:
    (tmp_path / "model.py").write_text(SLOW_FILE)
    proc = cli("model.py:make", "--inputs", "model.py:inputs", "--shapes", "4x16,3x16",
               "--dry-run", "-o", "out", cwd=tmp_path)
    _wait_for_first_shape(tmp_path / "out" / "sweep.status.jsonl", proc)
    proc.send_signal(signum)
    _, err = proc.communicate(timeout=240)
    assert proc.returncode == 130, err
    assert "1 finished shape(s) kept" in err
    results = torch_nsight.load(tmp_path / "out").results
    assert [r["status"] for r in results] == ["ok", "stopped"]


@pytest.mark.slow
def test_a_killed_child_loses_only_its_unfinished_shape(tmp_path: Path) -> None:
    (tmp_path / "model.py").write_text(SLOW_FILE)
    proc = cli("model.py:make", "--inputs", "model.py:inputs", "--shapes", "4x16,3x16",
               "--dry-run", "-o", "out", cwd=tmp_path)
    child = _wait_for_first_shape(tmp_path / "out" / "sweep.status.jsonl", proc)
    os.kill(child, signal.SIGKILL)
    out, err = proc.communicate(timeout=240)
    assert proc.returncode == 1, err  # a dry run with a failed shape
    assert out.splitlines()[0] == "4x16: ok (outputs (4, 8) float32)"
    assert out.splitlines()[1].startswith("3x16: failed: the child process ended")
    results = torch_nsight.load(tmp_path / "out").results
    assert [r["status"] for r in results] == ["ok", "failed"]


@pytest.mark.slow
def test_a_silent_child_is_stopped_with_what_it_was_doing(tmp_path: Path) -> None:
    (tmp_path / "model.py").write_text(SLOW_FILE)
    # silent for 8 s: longer than the child's start-up (Python and torch, a few seconds on
    # a busy 2-core machine), so only the hanging shape is silent that long
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TORCH_NSIGHT_SILENCE_S": "8"}
    proc = subprocess.run([sys.executable, "-m", "torch_nsight", "sweep", "model.py:make",
                           "--inputs", "model.py:inputs", "--shapes", "4x16,3x16",
                           "--dry-run", "-o", "out"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=240)
    assert proc.returncode == 1, proc.stderr  # a dry run with a failed shape
    assert "no sign of life" in proc.stderr and "in shape 3x16, warmup" in proc.stderr
    ok, stopped = torch_nsight.load(tmp_path / "out").results
    assert ok["status"] == "ok" and stopped["status"] == "stopped"
    assert "no sign of life (no output, no progress) for 8 s in shape 3x16, warmup" in \
        stopped["error"]


def test_a_focused_sweep_checks_make_inputs_before_its_first_pass() -> None:
    with pytest.raises(TypeError, match="make_inputs must be .*, got int"):
        torch_nsight.sweep("pkg.mod:make", [(2, 16)], make_inputs=42, focus=0.9)
