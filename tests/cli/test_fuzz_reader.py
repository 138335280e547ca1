"""Damaged input never escapes as a traceback: a real report cut short at many offsets, with
bytes overwritten, or under the wrong name, read by ``torch-nsight report``.

Each case runs in its own process (a reader that crashed would take the test run with it):
it either reads (exit 0, possibly with a warning) or fails with one line naming the file
(exit 1), and a failed read writes nothing: no output, no cache.
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


def _read(case: tuple[str, str, bytes], base: Path) -> tuple[str, Path, subprocess.CompletedProcess]:
    name, file_name, data = case
    folder = base / name
    folder.mkdir()
    (folder / file_name).write_bytes(data)
    env = {k: v for k, v in os.environ.items() if k != "TORCH_NSIGHT_CACHE_DIR"}
    proc = subprocess.run([sys.executable, "-m", "torch_nsight", "report", file_name,
                           "--csv", "out.csv"], cwd=folder, capture_output=True, text=True,
                          env={**env, "PYTHONPATH": str(ROOT)}, timeout=300)
    return name, folder, proc


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


# One test per case, so that the test run spreads them over its workers.
@pytest.mark.slow
@pytest.mark.parametrize("case", CASES, ids=[name for name, _, _ in CASES])
def test_every_damaged_report_reads_or_fails_in_one_line(
        tmp_path: Path, case: tuple[str, str, bytes]) -> None:
    name, file_name, _ = case
    _, folder, proc = _read(case, tmp_path)
    where = f"{name}: exit {proc.returncode}\n{proc.stderr}"
    assert proc.returncode in (0, 1), where  # not a crash, not a usage error
    assert "Traceback" not in proc.stderr, where
    if name in REFUSED:
        assert proc.returncode == 1, where
    if name in HINTS:
        assert HINTS[name] in proc.stderr, where
    if name in KEPT:
        assert proc.returncode == 0, where
        rows = (folder / "out.csv").read_text().strip().splitlines()
        assert len(rows) > 1, where  # a header and the kernels it kept
    if proc.returncode == 0:
        assert (folder / "out.csv").is_file(), where
        return
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("torch-nsight: error: ") and file_name in line, where
    written = sorted(p.name for p in folder.iterdir())
    assert len(written) == 1, where  # the input alone: no output, no cache
