"""Fixtures of the collect tests: fake ``ncu`` executables written as small scripts."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

FAKE_NCU = '''#!{python}
"""A stand-in for ncu: answers --version, records its argv, runs the application (the
arguments from the Python executable on) and prints the lines it was given, then exits 0
as the real ncu does when it profiled nothing."""
import json, subprocess, sys
args = sys.argv[1:]
if args == ["--version"]:
    print("NVIDIA (R) Nsight Compute Command Line Profiler")
    print("Version {version} (build 36398880) (public-release)")
    sys.exit(0)
if args == ["--query-metrics"]:
    sys.exit(0)
with open({argv_file!r}, "w") as handle:
    json.dump(args, handle)
status = 0
if {run_app!r}:
    start = args.index("-m") - 1
    status = subprocess.call(args[start:])
for line in {lines!r}:
    print(line, flush=True)
sys.exit(status)
'''

PERMISSION_LINE = (
    "==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU "
    "Performance Counters on the target device 0. For instructions on enabling permissions "
    "and to get more information see https://developer.nvidia.com/ERR_NVGPUCTRPERM")
NOTHING_LINE = "==WARNING== No kernels were profiled."


@pytest.fixture(autouse=True)
def _private_cache_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Keep the ncu metric cache (``$XDG_CACHE_HOME/torch_nsight``) out of the user's home,
    and the in-process memo of ``known_metric_bases`` out of other tests."""
    from torch_nsight.collect.shared import ncu as ncu_cli

    home = tmp_path / "cache home"
    monkeypatch.setenv("XDG_CACHE_HOME", str(home))
    ncu_cli.known_metric_bases.cache_clear()
    yield home
    ncu_cli.known_metric_bases.cache_clear()


@pytest.fixture
def fake_ncu(tmp_path: Path) -> Callable[..., tuple[Path, Path]]:
    """Return a function writing a fake ncu; it gives (ncu path, file its argv lands in)."""

    def write(lines: list[str], *, version: str = "2025.3.1.0", run_app: bool = True,
              folder: str = "fake ncu bin") -> tuple[Path, Path]:
        directory = tmp_path / folder
        directory.mkdir(exist_ok=True)
        argv_file = directory / "argv.json"
        script = directory / "ncu"
        script.write_text(FAKE_NCU.format(python=sys.executable, version=version,
                                          argv_file=str(argv_file), run_app=run_app,
                                          lines=lines))
        script.chmod(0o755)
        return script, argv_file

    return write


def read_argv(path: Path) -> list[str]:
    """The argv a fake ncu recorded."""
    return json.loads(path.read_text())
