"""torch-nsight profile on a CPU-only machine: the command line it builds, the rank choice,
usage errors, and a fake ncu that writes a real recorded report and passes the app's exit
status on."""

from __future__ import annotations

import logging
import lzma
import os
import shlex
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.recorded import load_recorded
from torch_nsight.cli.outputs import UsageError
from torch_nsight.cli.profile_script import parse_ranks
from torch_nsight.cli.text import joined_command
from torch_nsight.status import current_rank

from .conftest import imported_after, run_main

DATA = Path(__file__).resolve().parents[1] / "data"
ROOT = Path(__file__).resolve().parents[2]
RECORDED = DATA / "hand_s128.ncu-rep.xz"

FAKE_NCU = """#!{python}
import lzma, os, shutil, subprocess, sys
args = sys.argv[1:]
if args[:1] == ["--version"]:
    print("NVIDIA (R) Nsight Compute Command Line Profiler")
    print("Version 2025.3.1.0 (build 36398880) (public-release)")
    raise SystemExit(0)
if "--query-metrics" in args:
    raise SystemExit(0)
if "{mode}" == "denied":
    print("==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA "
          "GPU Performance Counters on the target device 0.")
    raise SystemExit(1)
out = args[args.index("-o") + 1]
app = args[args.index("-o") + 2:]
print("==PROF== Connected to process 1234 (/usr/bin/python3)", flush=True)
# what ncu sets for its application (torch_nsight.step() and instrument() look for it)
code = subprocess.run(app, env={{**os.environ,
                                "NV_COMPUTE_PROFILER_PERFWORKS_DIR": "/fake"}}).returncode
for _ in range(3):
    print('==PROF== Profiling "kernel" - 0: 0%....50%....100% - 1 pass')
with lzma.open("{report}") as src, open(out + ".ncu-rep", "wb") as dst:
    shutil.copyfileobj(src, dst)
print("==PROF== Report: " + out + ".ncu-rep")
raise SystemExit(code)
"""


def fake_ncu(tmp_path: Path, mode: str = "ok") -> Path:
    path = tmp_path / "ncu"
    path.write_text(FAKE_NCU.format(python=sys.executable, mode=mode, report=RECORDED))
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return path


def cli(*args: str, cwd: Path, env: dict[str, str] | None = None
        ) -> subprocess.CompletedProcess[str]:
    full = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    return subprocess.run([sys.executable, "-m", "torch_nsight", "profile", *args],
                          capture_output=True, text=True, cwd=cwd, env=full, timeout=300)


STEPS_ONLY = """
import sys, torch_nsight
for _ in range(int(sys.argv[1]) if sys.argv[1:2] and sys.argv[1].isdigit() else 20):
    with torch_nsight.step():
        pass
"""


@pytest.mark.slow
def test_dry_run_shows_the_command_and_the_metrics(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "train.py").write_text(STEPS_ONLY)

    def dry_run(*args: str) -> tuple[int, str, str]:
        return run_main(["profile", "--dry-run", "-v", *args], tmp_path, monkeypatch, capsys)

    _, short, _ = run_main(["profile", "--dry-run", "--steps", "10:12", "--", "python",
                            "train.py", "0"], tmp_path, monkeypatch, capsys)
    assert short.startswith("# dry run: ncu would profile `python train.py 0` with the fast "
                            "metric set")  # without -v: a line, not ncu's command
    assert "gpu__time_duration.sum" not in short and len(short.splitlines()) <= 10
    status, out, err = dry_run("--steps", "10:12", "--", "python", "train.py", "--lr", "3e-4")
    assert status == 0, err
    assert max(map(len, out.splitlines())) <= 120  # wrapped with shell continuations
    line = command_of(out)
    assert shlex.split(line)[-4:] == ["python", "train.py", "--lr", "3e-4"]
    assert line.startswith("TORCH_NSIGHT_STEPS=10:12 ")
    assert "--nvtx-include torch_nsight@measure" in line and "--clock-control none" in line
    assert line.endswith("python train.py --lr 3e-4")
    # fast by default: one replay pass, the busy counters standing in for the SOL section
    assert "# metrics (fast): gpu__time_duration.sum" in out
    assert "sm__pipe_tensor_cycles_active" in out
    assert "--section SpeedOfLight" not in line
    # identical blocks checked on step 9 and profiled once
    assert "TORCH_NSIGHT_REPLICATE=1 " in line and "--nvtx-exclude torch_nsight@replica" in line
    # the next scripts run no step ("0"): their rehearsals end at once, the command shown first
    _, every_block, _ = dry_run("--steps", "10:12", "--no-replicate", "--", "python",
                                "train.py", "0")
    assert every_block.startswith("TORCH_NSIGHT_STEPS=10:12 ")
    assert "REPLICATE" not in every_block and "torch_nsight@replica" not in every_block
    _, runs, err = dry_run("--steps", "10", "--runs", "3", "--", "python", "train.py", "0")
    assert runs.startswith("TORCH_NSIGHT_STEPS=10:13 "), err
    _, every, _ = dry_run("--launch-skip", "100", "--launch-count", "50", "--", "python",
                          "train.py")
    first = command_of(every)
    assert "--nvtx-include" not in first and "--launch-skip 100 --launch-count 50" in first
    assert "torch_nsight.step()" in every  # how to add the marker


def command_of(out: str) -> str:
    """The command line a dry run shows first, on one line again."""
    return joined_command(out.split("\n# ", 1)[0])


REHEARSED = """
import pathlib, torch, torch_nsight
from torch import nn
model = nn.Sequential(*[nn.Linear(8, 8) for _ in range(3)])
torch_nsight.instrument(model)
for _ in range(10_000):
    with torch_nsight.step():
        model(torch.randn(2, 8, requires_grad=True)).sum().backward()
pathlib.Path("ran to its end").touch()
"""


@pytest.mark.slow
def test_a_dry_run_rehearses_the_chosen_steps_without_ncu_and_stops_after_them(
        tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(REHEARSED)
    proc = cli("--dry-run", "--steps", "2:4", "--", sys.executable, "train.py", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "until its chosen steps ended" in out
    assert not (tmp_path / "ran to its end").exists()  # stopped after step 3, not at 10,000
    # the sibling check ran on step 1, as under ncu: blocks 1 and 2 are copies of 0
    assert "# step 1: 2 identical sibling(s) in 1 group(s) are left out" in out
    # every chosen step ran, instrumented, and the first one's calls table was recorded
    lines = {n: next(x for x in out.splitlines() if x.startswith(f"# step {n}: ok"))
             for n in (2, 3)}
    assert all("4 modules instrumented" in line for line in lines.values())
    calls = int(lines[2].split("modules instrumented, ")[1].split()[0])
    assert calls >= 6  # 3 linears forward, their backward, the sum
    assert out.rstrip().endswith("# ready: without --dry-run, ncu profiles step(s) 2, 3")
    # its steps ran on the CPU (this machine has no GPU, or the script chose none): said
    import torch

    if not torch.cuda.is_available():
        assert ("# warning: the chosen steps initialized no CUDA (the model and its inputs "
                "on the CPU?)") in out
    assert not (tmp_path / "torch_nsight_profile").exists()  # nothing written


STUBBORN = """
import pathlib, signal, subprocess, sys, torch_nsight
signal.signal(signal.SIGTERM, signal.SIG_IGN)  # it will not stop when asked
helper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
pathlib.Path("helper.pid").write_text(str(helper.pid))
for _ in range(10**9):
    with torch_nsight.step():
        pass
"""


def stopped_after_step_2(folder: Path, script: str) -> subprocess.CompletedProcess[str]:
    """A dry run of ``script`` (which never ends by itself) stopped after its step 2."""
    (folder / "train.py").write_text(script)
    proc = cli("--dry-run", "--steps", "2", "--", sys.executable, "train.py", cwd=folder)
    assert proc.returncode == 0, proc.stderr
    assert "until its chosen steps ended" in proc.stdout
    return proc


@pytest.mark.slow
def test_a_dry_run_stops_the_script_and_what_it_started(tmp_path: Path) -> None:
    stopped_after_step_2(tmp_path, STUBBORN)
    helper = int((tmp_path / "helper.pid").read_text())
    assert not running(helper)  # its process group was killed, the helper included


LOUD_ON_STOP = """
import signal, sys, torch_nsight
def stopped(signum, frame):  # as torchrun does: a traceback of the signal, then exit
    print("Traceback: got signal 15 (the launcher's own words)", file=sys.stderr, flush=True)
    sys.exit(1)
signal.signal(signal.SIGTERM, stopped)
for _ in range(10**9):
    with torch_nsight.step():
        pass
"""


@pytest.mark.slow
def test_what_the_command_says_once_stopped_is_not_shown(tmp_path: Path) -> None:
    proc = stopped_after_step_2(tmp_path, LOUD_ON_STOP)
    assert "got signal 15" not in proc.stdout + proc.stderr


def running(pid: int) -> bool:
    """Whether ``pid`` is alive (a zombie, killed but not yet reaped, is not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return not (stat.exists() and stat.read_text().split(")")[-1].split()[0] == "Z")


@pytest.mark.slow
def test_a_dry_run_says_what_ncu_would_miss(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "train.py").write_text(STEPS_ONLY)

    def dry_run(steps: str, *command: str) -> tuple[int, str, str]:
        return run_main(["profile", "--dry-run", "--steps", steps, "--", sys.executable,
                         *command], tmp_path, monkeypatch, capsys)

    # three steps, none instrumented: the run ends on its own
    status, out, err = dry_run("1:9", "train.py", "3")
    assert status == 0, err
    assert "to its end (exit status 0)" in out
    assert "# step 1: ok" in out and "# step 2: ok" in out
    assert "no module instrumented: call torch_nsight.instrument(model)" in out
    # fewer steps than chosen: said, and what ran is ready
    status, out, err = dry_run("2:6", "train.py", "4")
    assert status == 0, err
    assert "# only 2 of the 4 chosen steps ran: the command ended after step 3" in out
    # the chosen steps never come: one line that says how far it got, and a failure
    status, _, err = dry_run("5:6", "train.py", "3")
    assert status == 1
    (error,) = [x for x in err.splitlines() if x.startswith("torch-nsight: error")]
    assert "its last step was 2" in error and "--steps 5:6" in error
    # an open-ended choice is rehearsed on its first step
    status, out, err = dry_run("1:", "train.py")
    assert status == 0, err
    assert "until its chosen steps ended" in out
    assert out.rstrip().endswith("ncu profiles step(s) 1 and every later one")
    status, _, err = dry_run("0", "-c", "pass")
    assert status == 1 and "marked no step" in err


@pytest.mark.parametrize(("args", "message"), [
    (["--"], "no command to profile"),
    (["--steps", "5:2", "--", "python", "x.py"], "--steps"),
    (["--ranks", "0", "--", "python", "x.py"], "run torch-nsight inside torchrun"),
    (["--ranks", "a", "--", "python", "x.py"], "--ranks"),
    (["--runs", "3", "--", "python", "x.py"], "pass --steps A too"),
    (["--steps", "5:7", "--runs", "3", "--", "python", "x.py"], "--steps 5 --runs 3"),
    # refused at once, not after running the whole script
    (["--steps", "-1", "--", "python", "x.py"], "step indices start at 0"),
    (["--steps", "-1", "--dry-run", "--", "python", "x.py"], "step indices start at 0"),
    # one line naming the option, not argparse's "expected one argument"
    (["--steps", "-1:2", "--", "python", "x.py"],
     "--steps: steps '-1:2': step indices start at 0"),
    (["--steps", "5:3", "--", "python", "x.py"], "--steps: steps '5:3': need 0 <= A < B"),
    (["--steps", "abc", "--", "python", "x.py"],
     "--steps: steps 'abc': expected N, A:B or A:"),
    (["--dry-run", "--out", "a_file/out", "--", "python", "x.py"],
     "a_file is a file, not a folder"),
    (["--dry-run", "--timeline", "--steps", "1", "--out", "a_file", "--", "python", "x.py"],
     "a_file is a file, not a folder"),
    # a timeline's dry run checks the command as the other dry runs do
    (["--dry-run", "--timeline", "--steps", "1", "--", "python", "missing.py"],
     "missing.py: no such file"),
])
def test_usage_errors_are_one_line(tmp_path: Path, args: list[str], message: str,
                                   monkeypatch: pytest.MonkeyPatch,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("RANK", "")
    (tmp_path / "a_file").write_text("")
    status, out, err = run_main(["profile", *args], tmp_path, monkeypatch, capsys)
    assert status == 1 and out == ""
    (line,) = err.strip().splitlines()
    assert line.startswith("torch-nsight: error:") and message in line


def test_ranks_not_chosen_run_plainly_and_keep_their_exit_status(tmp_path: Path) -> None:
    proc = cli("--ranks", "0", "--", sys.executable, "-c", "raise SystemExit(3)",
               cwd=tmp_path, env={"RANK": "1"})
    assert proc.returncode == 3
    assert not (tmp_path / "torch_nsight_profile").exists()


def test_rank_selection() -> None:
    assert parse_ranks("0,2") == {0, 2} and parse_ranks(None) is None
    with pytest.raises(UsageError):
        parse_ranks("-1")
    assert current_rank({"RANK": "3", "LOCAL_RANK": "1"}) == 3
    assert current_rank({"LOCAL_RANK": "1"}) == 1 and current_rank({}) is None


@pytest.mark.slow
def test_a_profiled_run_prints_its_hotspots_and_passes_the_exit_status_on(
        tmp_path: Path) -> None:
    ncu = fake_ncu(tmp_path)
    proc = cli("--ncu", str(ncu), "--steps", "0:1", "--", sys.executable, "-c",
               "import sys; print('training'); sys.exit(2)", cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr  # the script failed: its status, report kept
    assert "training" in proc.stderr  # the script's own output is shown
    assert "40 kernels" in proc.stdout and "mlp.gate_proj" in proc.stdout
    assert (tmp_path / "torch_nsight_profile" / "report.ncu-rep").is_file()
    again = cli("--ncu", str(ncu), "--", sys.executable, "-c", "pass", cwd=tmp_path)
    assert again.returncode == 1 and "--force" in again.stderr


TRAIN = """
import sys, torch, torch_nsight
from torch import nn
model = nn.Sequential(*[nn.Linear(8, 8) for _ in range(3)])
handle = torch_nsight.instrument(model, record_calls=False)
for _ in range(4):
    with torch_nsight.step():
        model(torch.randn(2, 8, requires_grad=True)).sum().backward()
print("replicas", [g["replicas"] for g in handle.replication.groups])
"""


@pytest.mark.slow
def test_the_script_runs_on_the_engine_and_its_steps_are_written_down(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    import json

    ncu = fake_ncu(tmp_path)
    (tmp_path / "train.py").write_text(TRAIN)
    proc = cli("--ncu", str(ncu), "--steps", "2:4", "--", sys.executable, "train.py",
               cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    # the check ran on step 1, in the script, with the profile's request
    assert "replicas [['1', '2']]" in proc.stderr
    out = tmp_path / "torch_nsight_profile"
    record = json.loads((out / "report.run.json").read_text())
    assert [(s["index"], s["status"]) for s in record["steps_profiled"]] == [(2, "ok"),
                                                                            (3, "ok")]
    assert [(s["modules"], s["replicas"], s["calls"]) for s in record["steps_profiled"]] \
        == [(4, 2, 0)] * 2  # record_calls=False: no calls table
    assert record["kernels_profiled"] == 3 and record["kernels_per_step"] == 1.5
    assert record["command"] == [sys.executable, "train.py"]
    assert set(record["phases_s"]) == {"start", "profiling", "load"}
    assert not (out / "report.status.jsonl").exists()
    assert "profiling 3 kernels" in proc.stderr
    import torch_nsight  # the folder reads back without a word about the record beside it

    with caplog.at_level(logging.WARNING):
        assert len(torch_nsight.load(out, cache=False).kernels) == 40
    assert not caplog.records


@pytest.mark.slow
def test_the_command_itself_never_imports_torch(tmp_path: Path) -> None:
    # torch is the script's to import: the command's own start-up stays short (it imported
    # torch to read --steps, 3 s on the GPU machine before the script started)
    (tmp_path / "train.py").write_text(STEPS_ONLY)
    found = imported_after(["profile", "--ncu", str(fake_ncu(tmp_path)), "--steps", "2:4",
                            "--", sys.executable, "train.py"], tmp_path)
    assert found["status"] == 0 and "torch" not in found["heavy"]
    assert "pandas" in found["heavy"]  # the report was read: the check above means something


def test_counters_not_permitted(tmp_path: Path) -> None:
    proc = cli("--ncu", str(fake_ncu(tmp_path, "denied")), "--", sys.executable, "-c", "pass",
               cwd=tmp_path)
    assert proc.returncode == 1
    assert "ERR_NVGPUCTRPERM" in proc.stderr and "NVreg_RestrictProfilingToAdminUsers" in proc.stderr


def test_a_real_profile_of_chosen_steps_holds_only_them() -> None:
    # recorded on the H200 with `torch-nsight profile --steps 3:5` (tests/data/README.md)
    profile = load_recorded(DATA / "profile_steps.ncu-rep.xz")
    k = profile.kernels
    assert sorted(k["run"].unique().tolist()) == [3, 4]
    per_step = k.groupby(["run", "direction"], dropna=False).size().unstack()
    assert per_step.loc[3].tolist() == per_step.loc[4].tolist()  # the same step twice
    assert (per_step["bwd"] > 0).all() and (per_step["fwd"] > 0).all()  # backward kept


def test_a_real_rank_profile_under_torchrun_holds_rank_0s_chosen_step() -> None:
    # recorded on two H200s with `torchrun --no-python torch-nsight profile --ranks 0`
    profile = load_recorded(DATA / "profile_rank0.ncu-rep.xz")
    k = profile.kernels
    assert k["run"].unique().tolist() == [2]
    assert set(k["direction"].dropna()) == {"fwd", "bwd"}
    assert not k["kernel"].str.contains("nccl", case=False).any()  # -k '^(?!nccl)'


def test_reports_of_ranks_carry_their_rank() -> None:
    both = load_recorded([DATA / "profile_rank0.ncu-rep.xz", RECORDED])
    k = both.kernels
    ranked = k[k["source"].str.endswith("profile_rank0.ncu-rep.xz")]
    assert ranked["rank"].tolist() == [0] * len(ranked)
    assert k.loc[~k.index.isin(ranked.index), "rank"].isna().all()


@pytest.mark.parametrize(("world", "metric_set", "kernel", "expected"), [
    ("2", "roofline", None, "-k 'regex:^(?!nccl)'"),  # replay would hang: left out
    ("2", "duration", None, None),  # one pass, nothing replayed: kept
    ("1", "roofline", None, None),  # one process: nothing to wait for
    ("2", "roofline", "gemm", "-k regex:gemm"),  # the user's own filter, as given
])
def test_nccl_kernels_are_left_out_where_replay_would_hang(
        tmp_path: Path, world: str, metric_set: str, kernel: str | None,
        expected: str | None) -> None:
    (tmp_path / "train.py").write_text("")  # checked: a dry run fails on a missing script
    args = ["-v", "--dry-run", "--ranks", "0", "--metric-set", metric_set,
            *(["-k", kernel] if kernel else []), "--", "python", "train.py"]
    proc = cli(*args, cwd=tmp_path, env={"RANK": "0", "WORLD_SIZE": world})
    assert proc.returncode == 0, proc.stderr
    line = command_of(proc.stdout)
    if expected is None:
        assert " -k " not in line
    else:
        assert expected in line


def test_the_duration_set_is_one_pass() -> None:
    from torch_nsight.metrics import METRIC_SETS, METRICS, SINGLE_PASS_SETS

    kinds = {m.name: m.kind for m in METRICS}
    chosen = METRIC_SETS["duration"]
    assert "duration" in SINGLE_PASS_SETS and not chosen.sections
    counters = [n for n in chosen.metrics if kinds[n] in ("counter", "percent", "clock")]
    assert counters == ["gpu__time_duration.sum"]


def test_both_ranks_with_their_nccl_kernels_attributed() -> None:
    # recorded on two H200s with tests/data/record_ddp.sh: --ranks 0,1 --metric-set duration
    import ncu_report

    import torch_nsight

    profile = load_recorded(DATA / "ddp_nccl")
    k = profile.kernels
    table = profile.by_rank()
    assert table["rank"].tolist() == [0, 1]
    for rank in (0, 1):
        mine = k[k["rank"] == rank]
        assert mine["run"].unique().tolist() == [2]  # step 2 alone, on each rank
        nccl = mine[mine["kernel"].str.startswith("nccl")]
        assert len(nccl) == 2  # DDP's two gradient buckets, one all-reduce each
        # launched from autograd's thread inside the backward of the module whose gradient
        # filled the bucket; NCCL's own range names the collective
        assert set(nccl["direction"]) == {"bwd"} and set(nccl["op"]) == {"ncclAllReduce"}
        assert nccl["module"].ne(torch_nsight.analyze.UNATTRIBUTED).all()
        row = table[table["rank"] == rank].iloc[0]
        assert row["nccl_ns"] == pytest.approx(nccl["duration_ns"].sum())
        # the top module is the one holding most of the rank's own work, not the one whose
        # backward waited in an all-reduce (rank 0's input_layernorm "held" 58.6% that way)
        work = mine[~mine["kernel"].str.startswith("nccl")]
        most = work.groupby("module")["duration_ns"].sum()
        assert row["top_module"] == most.idxmax()
        assert row["top_module_pct"] == pytest.approx(100 * most.max() / work["duration_ns"].sum())
    # the times agree with NVIDIA's reader, read here directly
    with tempfile.TemporaryDirectory() as folder:
        report = Path(folder) / "r.ncu-rep"
        report.write_bytes(lzma.decompress((DATA / "ddp_nccl/report-rank1.ncu-rep.xz")
                                           .read_bytes()))
        found = ncu_report.load_report(str(report)).range_by_idx(0)
        direct = sum(found.action_by_idx(i).metric_by_name("gpu__time_duration.sum").as_double()
                     for i in range(found.num_actions())
                     if found.action_by_idx(i).name().startswith("nccl"))
    assert table.loc[table["rank"] == 1, "nccl_ns"].item() == pytest.approx(direct)
    assert profile.meta.sources[0].metric_set == "duration"


@pytest.mark.parametrize(("exit_status", "expected"), [(0, 30), (1, None), (-2, None),
                                                       (None, None)])
def test_the_eta_counts_on_a_last_run_that_ended_well(tmp_path: Path, exit_status: int | None,
                                                      expected: int | None) -> None:
    """The record is written also when a run fails or is interrupted: only a run that ended
    well tells how many kernels a whole run profiles."""
    import json

    from torch_nsight import formats
    from torch_nsight.collect.parent.script import _expected

    report = tmp_path / "report.ncu-rep"
    command = [sys.executable, "train.py"]
    report.with_suffix(formats.RUN_SUFFIX).write_text(json.dumps({
        "command": command, "metric_set": "fast", "replicate": True,
        "kernels_per_step": 15.0, "exit_status": exit_status}))
    assert _expected(report, command, "fast", 2, True) == expected
