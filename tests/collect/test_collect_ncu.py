"""ncu: finding it, its version, the argument list, and its output read for failures
(fake ncu executables print the real error lines)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

import torch_nsight
from torch_nsight.collect.shared import ncu as ncu_cli
from torch_nsight.environment import NCU_ENV
from torch_nsight.errors import (
    CounterPermissionError,
    NcuNotFoundError,
    NcuVersionError,
    NothingProfiledError,
    TorchNsightError,
)
from torch_nsight.metrics import METRIC_SETS

from .conftest import NOTHING_LINE, PERMISSION_LINE, read_argv
from .models import Stack

APP = [sys.executable, "-m", "torch_nsight.collect.child.worker", "/private dir/sweep.job"]


def test_default_command() -> None:
    roofline = METRIC_SETS["roofline"]
    cmd = ncu_cli.build_command("/usr/local/cuda/bin/ncu", report="/out dir/sweep",
                                metric_set=roofline, app=APP)
    assert cmd == [
        "/usr/local/cuda/bin/ncu", "--clock-control", "none",
        "--target-processes", "application-only",
        "--nvtx", "--nvtx-include", "torch_nsight@measure",
        "--nvtx-exclude", "torch_nsight@replica",
        "--section", "SpeedOfLight",
        "--metrics", ",".join(roofline.metrics),
        "-f", "-o", "/out dir/sweep", *APP]


def test_command_options() -> None:
    lean = METRIC_SETS["lean"]
    cmd = ncu_cli.build_command("ncu", report="r", metric_set=lean, app=APP,
                                metrics=["gpu__time_duration.sum", "dram__bytes.sum"],
                                exclude_replicas=False, extra_args=["--cache-control", "none"])
    assert "--nvtx-exclude" not in cmd and "--section" not in cmd
    assert cmd[cmd.index("--metrics") + 1] == "gpu__time_duration.sum,dram__bytes.sum"
    assert cmd[cmd.index("--cache-control"):cmd.index("--cache-control") + 2 + len(APP)] == \
        ["--cache-control", "none", *APP]
    full = ncu_cli.build_command("ncu", report="r", metric_set=METRIC_SETS["full"], app=APP)
    sections = [cmd_arg for i, cmd_arg in enumerate(full) if full[i - 1] == "--section"]
    assert sections == list(METRIC_SETS["full"].sections)


def test_metric_sets_and_lists() -> None:
    assert ncu_cli.resolve_metric_set("lean") is METRIC_SETS["lean"]
    custom = ncu_cli.resolve_metric_set(["dram__bytes.sum"])
    assert custom.metrics == ("gpu__time_duration.sum", "dram__bytes.sum")
    assert custom.sections == ()
    with pytest.raises(ValueError, match="list of them"):
        ncu_cli.resolve_metric_set("dram__bytes.sum")  # a string is never split into chars
    with pytest.raises(ValueError):
        ncu_cli.resolve_metric_set([])
    listed = frozenset({"a__x"} | {f"filler__{i}" for i in range(ncu_cli.MIN_LISTED)})
    assert ncu_cli.filter_metrics(["a__x.sum", "b__y.sum", "launch__grid_size"], listed) == \
        ["a__x.sum", "launch__grid_size"]
    assert ncu_cli.filter_metrics(["b__y.sum"], frozenset({"a__x"})) == ["b__y.sum"]


def test_extra_args_checked() -> None:
    assert ncu_cli.check_extra_args(("--cache-control", "none")) == ["--cache-control", "none"]
    with pytest.raises(TypeError, match="not a string"):
        ncu_cli.check_extra_args("--cache-control none")
    with pytest.raises(ValueError, match="clock-control"):
        ncu_cli.check_extra_args(["--clock-control", "base"])
    with pytest.raises(ValueError):
        ncu_cli.check_extra_args(["--export=x"])


def test_find_ncu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fake_ncu) -> None:
    script, _ = fake_ncu([])
    monkeypatch.delenv(NCU_ENV, raising=False)
    assert ncu_cli.find_ncu(script) == str(script)
    with pytest.raises(NcuNotFoundError, match="not an executable"):
        ncu_cli.find_ncu(tmp_path / "no-such-ncu")
    monkeypatch.setenv(NCU_ENV, str(script))
    assert ncu_cli.find_ncu() == str(script)
    monkeypatch.delenv(NCU_ENV)
    monkeypatch.setenv("PATH", str(script.parent))
    assert ncu_cli.find_ncu() == str(script)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.setattr(ncu_cli, "DEFAULT_NCU", str(tmp_path / "missing" / "ncu"))
    with pytest.raises(NcuNotFoundError, match="profiler=None"):
        ncu_cli.find_ncu()


def test_missing_ncu_fails_before_any_child(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv(NCU_ENV, raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(ncu_cli, "DEFAULT_NCU", str(tmp_path / "ncu"))
    with pytest.raises(NcuNotFoundError):
        torch_nsight.sweep(Stack(), [(2, 16)], quiet=True)


def test_version(fake_ncu) -> None:
    assert ncu_cli.parse_version("Version 2025.3.1.0 (build 1)") == (2025, 3, 1)
    assert ncu_cli.parse_version("nonsense") is None
    old, _ = fake_ncu([], version="2019.5.0.0", folder="old")
    with pytest.raises(NcuVersionError, match="or newer"):
        ncu_cli.ncu_version(str(old))
    new, _ = fake_ncu([], folder="new")
    assert ncu_cli.ncu_version(str(new)) == (2025, 3, 1)


def test_output_parsing() -> None:
    out = ncu_cli.NcuOutput()
    for line in ['==PROF== Profiling "ampere_sgemm" - 0: 0%....50%....100% - 10 passes',
                 '==PROF== Profiling "vectorized_elementwise" - 1: 0%....100% - 10 passes',
                 "hello from the model", "==WARNING== Clocks are not locked."]:
        out.feed(line + "\n")
    assert out.kernels_profiled == 2 and not out.errors
    ncu_cli.raise_for_output(out, report_exists=True, returncode=0)
    with pytest.raises(TorchNsightError, match="no report"):
        ncu_cli.raise_for_output(out, report_exists=False, returncode=1)
    out.feed(NOTHING_LINE)
    with pytest.raises(NothingProfiledError, match="exits 0"):
        ncu_cli.raise_for_output(out, report_exists=False, returncode=0)
    out.feed(PERMISSION_LINE)
    with pytest.raises(CounterPermissionError, match="NVreg_RestrictProfilingToAdminUsers"):
        ncu_cli.raise_for_output(out, report_exists=False, returncode=0)


def test_counter_permission_from_a_fake_ncu(fake_ncu) -> None:
    script, _ = fake_ncu([PERMISSION_LINE], run_app=False)
    with pytest.raises(CounterPermissionError, match="ERR_NVGPUCTRPERM"):
        torch_nsight.sweep(Stack(), [(2, 16)], ncu=script, quiet=True)


@pytest.mark.slow
def test_nothing_profiled_names_the_cpu_and_paths_survive(tmp_path: Path, fake_ncu) -> None:
    """A fake ncu runs the real child (on the CPU here) and says it profiled nothing."""
    script, argv_file = fake_ncu([NOTHING_LINE])
    out = tmp_path / "out dir with 'quotes' and \"double\" $HOME"
    with pytest.raises(NothingProfiledError, match="CPU") as info:
        torch_nsight.sweep({"a": Stack(2)}, [(2, 16)], ncu=script, output_dir=out,
                           metric_set=["dram__bytes.sum"], ncu_args=["--cache-control", "none"],
                           quiet=True)
    assert "torch.cuda.is_available() was False" in str(info.value)
    argv = read_argv(argv_file)
    assert argv[:8] == ["--clock-control", "none", "--target-processes", "application-only",
                        "--nvtx", "--nvtx-include", "torch_nsight@measure", "--nvtx-exclude"]
    assert argv[argv.index("--metrics") + 1] == "gpu__time_duration.sum,dram__bytes.sum"
    assert argv[argv.index("-o") + 1] == str(out / "sweep")  # one argument, quotes and all
    app = argv[argv.index("-m") - 1:]
    assert app[:3] == [sys.executable, "-m", "torch_nsight.collect.child.start"]
    assert not os.path.exists(app[3])  # the job file is deleted afterwards
    # the child did run, and its results and the job description are kept
    assert (out / "sweep.result.json").is_file() and (out / "job.json").is_file()


COUNTING_NCU = '''#!{python}
"""Lists {n} metrics for --query-metrics and counts how often it was asked."""
import sys
if sys.argv[1:] == ["--query-metrics"]:
    with open({count!r}, "a") as handle:
        handle.write("x")
    print("Device NVIDIA H200 (GH100)")
    for i in range({n}):
        print(f"sm__metric_{{i}}    Counter    # some description")
'''


def counting_ncu(folder: Path, n: int = 150) -> tuple[Path, Path]:
    folder.mkdir(exist_ok=True)
    script, count = folder / "ncu", folder / "queries"
    script.write_text(COUNTING_NCU.format(python=sys.executable, count=str(count), n=n))
    script.chmod(0o755)
    return script, count


def queries(count: Path) -> int:
    return len(count.read_text()) if count.exists() else 0


def test_metric_list_is_cached_on_disk(tmp_path: Path, _private_cache_home: Path) -> None:
    ncu, count = counting_ncu(tmp_path / "bin")
    first = ncu_cli.known_metric_bases(str(ncu), "0")
    assert len(first) == 150 and "sm__metric_7" in first and queries(count) == 1
    (cached,) = (_private_cache_home / "torch_nsight").glob("ncu-metrics-*.txt")
    ncu_cli.known_metric_bases.cache_clear()  # a later sweep: a new process
    assert ncu_cli.known_metric_bases(str(ncu), "0") == first and queries(count) == 1
    # another device selection is another key
    ncu_cli.known_metric_bases(str(ncu), "1")
    assert queries(count) == 2
    assert len(list(cached.parent.glob("ncu-metrics-*.txt"))) == 2
    assert not list(cached.parent.glob(".*.tmp"))  # written atomically, nothing left over


def test_metric_cache_key_follows_the_ncu_file(tmp_path: Path) -> None:
    ncu, count = counting_ncu(tmp_path / "bin")
    key = ncu_cli._metrics_cache_path(str(ncu), "0")
    assert ncu_cli._metrics_cache_path(str(ncu), "0") == key
    assert ncu_cli._metrics_cache_path(str(ncu), "1") != key
    ncu_cli.known_metric_bases(str(ncu), "0")
    ncu.write_text(ncu.read_text() + "# upgraded\n")  # another size (and mtime)
    st = ncu.stat()
    os.utime(ncu, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    assert ncu_cli._metrics_cache_path(str(ncu), "0") != key
    ncu_cli.known_metric_bases.cache_clear()
    ncu_cli.known_metric_bases(str(ncu), "0")
    assert queries(count) == 2  # the changed ncu is asked again


def test_metric_cache_errors_fall_back_to_querying(tmp_path: Path, monkeypatch) -> None:
    ncu, count = counting_ncu(tmp_path / "bin")
    blocker = tmp_path / "not a directory"
    blocker.write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocker))  # cannot be read nor written
    for _ in range(2):
        ncu_cli.known_metric_bases.cache_clear()
        assert len(ncu_cli.known_metric_bases(str(ncu), "0")) == 150
    assert queries(count) == 2
    # a failed or incomplete query is not cached
    short, short_count = counting_ncu(tmp_path / "short", n=3)
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    for _ in range(2):
        ncu_cli.known_metric_bases.cache_clear()
        assert len(ncu_cli.known_metric_bases(str(short), "0")) == 3
    assert queries(short_count) == 2 and not (tmp_path / "home").exists()


def test_an_ncu_that_runs_no_child_is_named(fake_ncu) -> None:
    """A fake ncu that exits 0 without starting the child: the failure says the child
    printed nothing (it once ended on "Its last output lines:" and nothing after it)."""
    from torch_nsight.errors import TorchNsightError

    script, _ = fake_ncu([], run_app=False)
    with pytest.raises(TorchNsightError) as info:
        torch_nsight.sweep(Stack(), [(2, 16)], ncu=script, quiet=True)
    message = str(info.value)
    assert "It printed nothing" in message and "Its last output lines" not in message
