"""The wheel works on its own: built from this tree, installed with only its declared
dependencies into a fresh virtual environment, and run from a folder outside the repository.

Slow (a venv, torch and every dependency installed: about a minute), so it runs only when
``TORCH_NSIGHT_PACKAGING=1`` (``.ci/run`` sets it in a step of its own)::

    TORCH_NSIGHT_PACKAGING=1 python -m pytest -q tests/test_packaging.py

pip resolves the dependencies from the indexes this machine's pip is configured with; torch
is installed first, pinned to the CPU build, as the README says.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TORCH = "torch==2.13.0"
ENABLED = os.environ.get("TORCH_NSIGHT_PACKAGING") == "1"
INSTALL_TIMEOUT_S = 900

pytestmark = [
    pytest.mark.packaging,
    pytest.mark.skipif(not ENABLED, reason="builds and installs the wheel in a fresh venv: "
                                           "set TORCH_NSIGHT_PACKAGING=1"),
]


def run(argv: list[str | Path], cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess:
    """Run outside the repository, with nothing pointing Python back at it."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    result = subprocess.run([str(a) for a in argv], cwd=cwd, env=env, capture_output=True,
                            text=True, timeout=timeout, check=False)
    assert result.returncode == 0, (f"{argv} exited {result.returncode}\n"
                                    f"stdout:\n{result.stdout[-3000:]}\n"
                                    f"stderr:\n{result.stderr[-3000:]}")
    return result


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel built from a copy of this tree (dependencies not built): a build writes into
    the tree it builds, and ``.ci/run`` installs the repository beside this test."""
    dist = tmp_path_factory.mktemp("dist")
    tree = tmp_path_factory.mktemp("tree") / "torch_nsight"
    shutil.copytree(ROOT, tree, ignore=shutil.ignore_patterns(
        ".git", "build", "*.egg-info", "__pycache__", ".*_cache", ".venv*"))
    run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", dist, tree], cwd=dist,
        timeout=INSTALL_TIMEOUT_S)
    (built,) = dist.glob("torch_nsight-*.whl")
    return built


@pytest.fixture(scope="module")
def venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv holding torch (CPU build) and the wheel with its declared dependencies;
    returns its ``bin`` folder."""
    folder = tmp_path_factory.mktemp("venv")
    run([sys.executable, "-m", "venv", folder], cwd=folder)
    python = folder / "bin" / "python"
    pip = [python, "-m", "pip", "install", "-q", "--no-compile"]
    run([*pip, TORCH], cwd=folder, timeout=INSTALL_TIMEOUT_S)
    run([*pip, wheel], cwd=folder, timeout=INSTALL_TIMEOUT_S)
    return folder / "bin"


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A working folder outside the repository."""
    assert ROOT not in tmp_path.parents
    return tmp_path


def test_wheel_contents(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    assert "torch_nsight/demo/llama_block_fwd_bwd.ncu-rep.xz" in names
    assert "torch_nsight/demo/llama.py" in names
    assert "torch_nsight/py.typed" in names
    assert not [n for n in names if n.startswith(("tests/", "examples/", "bench/"))]
    metadata = zipfile.ZipFile(wheel).read(
        next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    requires = {line.split(":", 1)[1].strip().split(";")[0].split(">")[0].split("=")[0]
                for line in metadata.splitlines() if line.startswith("Requires-Dist:")
                and "extra ==" not in line}
    assert {"pyarrow", "tqdm", "pandas", "torch"} <= requires


def test_installed_from_the_wheel(venv: Path, outside: Path) -> None:
    where = run([venv / "python", "-c", "import torch_nsight; print(torch_nsight.__file__)"],
                cwd=outside).stdout.strip()
    assert Path(where).is_relative_to(venv.parent), where
    run([venv / "python", "-m", "pip", "check"], cwd=outside)


def test_recorded_demo_from_the_wheel(venv: Path, outside: Path) -> None:
    result = run([venv / "torch-nsight", "demo", "--recorded", "--out", outside / "demo",
                  "-n", "3"], cwd=outside)
    assert "reading the recorded report llama_block_fwd_bwd.ncu-rep.xz" in result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == ("NVIDIA H200: 40 kernels, shapes 1x512; 92% of GPU time inside "
                        "module ranges")
    assert lines[3].split()[:3] == ["1", "self_attn", "bwd"]
    assert sorted(p.name for p in (outside / "demo").iterdir()) == [
        "hotspots.csv", "roofline.png", "scaling.png"]


def test_plain_demo_on_this_machine(venv: Path, outside: Path) -> None:
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: the plain demo would profile")
    result = run([venv / "torch-nsight", "demo", "-n", "1"], cwd=outside)
    assert result.stderr.startswith("no CUDA GPU is visible: reading the recorded report")
    assert "self_attn" in result.stdout


def test_report_from_the_wheel(venv: Path, outside: Path) -> None:
    report = outside / "convnet_fwd.ncu-rep.xz"
    shutil.copy(ROOT / "tests" / "data" / report.name, report)
    result = run([venv / "torch-nsight", "report", report, "--by", "module",
                  "--depth", "1", "--csv", "modules.csv"], cwd=outside)
    lines = result.stdout.splitlines()
    assert lines[0].startswith("NVIDIA H200: 23 kernels, shapes 8x3x64x64")
    assert "stage2" in result.stdout and "wrote modules.csv" in lines
    assert (outside / "modules.csv").read_text().startswith("variant,")
    # python -m works from the wheel too
    result = run([venv / "python", "-m", "torch_nsight", "report", report, "-n", "1"],
                 cwd=outside)
    assert result.stdout.splitlines()[0] == lines[0]
