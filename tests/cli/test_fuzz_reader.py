"""Damaged input never escapes as a traceback: a real report cut short at many offsets, with
bytes overwritten, or under the wrong name, read by ``torch-nsight report``.

The cases are read by the CLI in a process apart from the test run (a reader that crashed
would take it along), one after the other: each either reads (exit 0, possibly with a
warning) or fails with one line naming the file (exit 1), and a failed read writes nothing:
no output, no cache.
"""

from __future__ import annotations

import lzma
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "tests" / "data" / "hand_s128.ncu-rep.xz"


def _cases() -> list[tuple[str, str, bytes]]:
    """(case id, file name, bytes): cut, overwritten and misnamed forms of one report."""
    raw = lzma.decompress(FIXTURE.read_bytes())
    packed = FIXTURE.read_bytes()
    cases = [(f"cut-to-{n}", "run.ncu-rep", raw[:n])
             for n in (0, 3, 4, 16, 100, 1_000, 10_000, 100_000)]
    cases += [(f"cut-by-{n}", "run.ncu-rep", raw[:-n])
              for n in (1, 7, 1_000, 50_000, len(raw) // 2)]
    rng = random.Random(20261124)
    for offset in sorted(rng.sample(range(len(raw) - 64), 6)):
        data = bytearray(raw)
        data[offset:offset + 64] = bytes(rng.randrange(256) for _ in range(64))
        cases.append((f"overwritten-at-{offset}", "run.ncu-rep", bytes(data)))
    header = bytearray(raw)
    header[:8] = b"\xff" * 8
    cases.append(("overwritten-header", "run.ncu-rep", bytes(header)))
    cases.append(("xz-cut", "run.ncu-rep.xz", packed[: len(packed) // 2]))
    cases += [("raw-named-xz", "run.ncu-rep.xz", raw), ("xz-named-raw", "run.ncu-rep", packed),
              ("report-named-json", "run.json", raw), ("report-named-parquet", "run.parquet",
                                                          raw),
              ("report-named-gz-trace", "trace.json.gz", packed)]
    return cases


CASES = _cases()


#: Reads the case folders named on its command line, one after the other, each with the CLI
#: in this fresh process; each folder gets ``stderr.txt`` (fd 2 itself, whatever holds the
#: stream) and, once its read returned, ``status.txt``. A crash leaves the folder without it.
BATCH = """
import gc, os, sys, warnings
from torch_nsight.cli.main import main
warnings.simplefilter("always")  # each case shows its own warnings, not only the first
for folder in sys.argv[1:]:
    os.chdir(folder)
    name = next(p for p in os.listdir('.') if p != 'stderr.txt')
    sys.stderr.flush()
    saved = os.dup(2)
    with open('stderr.txt', 'w') as err:
        os.dup2(err.fileno(), 2)
        try:
            status = main(['report', name, '--csv', 'out.csv'])
            gc.collect()  # a reader object that crashes when freed does it in its own case
        except SystemExit as done:
            status = done.code
        except BaseException as raised:
            status = 'raised ' + type(raised).__name__
        sys.stderr.flush()
        os.dup2(saved, 2)
    os.close(saved)
    with open(os.path.join(folder, 'status.txt'), 'w') as out:
        out.write(str(status))
"""


def _read_all(base: Path) -> dict[str, tuple[Path, object, str]]:
    """Every case read by the CLI: {case: (folder, exit status, stderr)}. The cases share
    fresh processes (one start-up, not one per case); a process that crashes loses only
    the case it was reading, recorded as ``crashed``, and the next one goes on."""
    folders = {}
    for name, file_name, data in CASES:
        folder = base / name
        folder.mkdir()
        (folder / file_name).write_bytes(data)
        folders[name] = folder
    env = {k: v for k, v in os.environ.items() if k != "TORCH_NSIGHT_CACHE_DIR"}
    env["PYTHONPATH"] = str(ROOT)
    results: dict[str, tuple[Path, object, str]] = {}
    while len(results) < len(folders):
        todo = [n for n in folders if n not in results]
        try:
            batch = subprocess.run([sys.executable, "-c", BATCH,
                                    *(str(folders[n]) for n in todo)],
                                   capture_output=True, text=True, env=env, timeout=600,
                                   check=False)
        except subprocess.TimeoutExpired:
            hung = [n for n in todo if (folders[n] / "stderr.txt").exists()
                    and not (folders[n] / "status.txt").exists()]
            raise AssertionError(f"reading hung in case {hung}") from None
        if not (folders[todo[0]] / "stderr.txt").exists():  # it never reached a case
            raise AssertionError(f"the reading process failed to start (exit "
                                 f"{batch.returncode}):\n{batch.stderr[-3000:]}")
        if (folders[todo[-1]] / "status.txt").exists():  # it read them all: then it exits
            assert batch.returncode == 0, (f"the process crashed after its last case "
                                           f"{todo[-1]} (exit {batch.returncode})")
        for name in todo:
            folder = folders[name]
            status_file, err_file = folder / "status.txt", folder / "stderr.txt"
            err = err_file.read_text() if err_file.exists() else ""
            if status_file.exists():
                status: object = status_file.read_text()
                status_file.unlink()
            elif err_file.exists():  # the case the process died in
                status = "crashed"
            else:
                break  # not reached: the next process starts here
            err_file.unlink(missing_ok=True)
            results[name] = (folder, int(status) if status.isdigit() else status, err)
    return results


# the forms that cannot be read are refused, not read as something else
REFUSED = {"cut-to-0", "cut-to-3", "cut-to-100", "xz-cut", "report-named-json",
           "report-named-parquet", "report-named-gz-trace"}
# a misnamed file is told what its content is
HINTS = {
    "report-named-json": "content is an Nsight Compute report: rename it to end in .ncu-rep",
    "report-named-parquet": "content is an Nsight Compute report: rename it to end in .ncu-rep",
    "xz-named-raw": "content is xz-compressed: rename it to end in .ncu-rep.xz",
    "report-named-gz-trace": "content is xz-compressed: rename it to end in .ncu-rep.xz",
}
# a report cut at its end keeps what it holds: a header and the kernels it kept
KEPT = {"cut-by-1", "cut-by-1000"}


def test_the_cases_hold_every_form_checked_by_name() -> None:
    names = {name for name, _, _ in CASES}
    assert names >= REFUSED | set(HINTS) | KEPT


@pytest.mark.slow
def test_every_damaged_report_reads_or_fails_in_one_line(tmp_path: Path) -> None:
    problems = []
    for name, (folder, status, err) in _read_all(tmp_path).items():
        file_name = next(f for n, f, _ in CASES if n == name)
        try:
            _check(name, file_name, folder, status, err)
        except AssertionError as failed:
            problems.append(f"{name}: exit {status}: {failed}\n{err}")
    assert not problems, "\n".join(problems)


def _check(name: str, file_name: str, folder: Path, status: object, err: str) -> None:
    assert status in (0, 1), "not a crash, not a usage error"
    assert "Traceback" not in err
    if name in REFUSED:
        assert status == 1, "refused"
    if name in HINTS:
        assert HINTS[name] in err, "told what its content is"
    if name in KEPT:
        assert status == 0, "read"
        rows = (folder / "out.csv").read_text().strip().splitlines()
        assert len(rows) > 1, "a header and the kernels it kept"
    if status == 0:
        assert (folder / "out.csv").is_file(), "its output written"
        return
    (line,) = err.strip().splitlines()
    assert line.startswith("torch-nsight: error: ") and file_name in line, "one line"
    written = sorted(p.name for p in folder.iterdir())
    assert len(written) == 1, f"the input alone, no output, no cache: {written}"
