"""``torch-nsight profile --ranks 0,1`` on a CPU-only machine, with the fake ncu of
test_profile_stalls.py: two ranks run at once, both writing their report into one ``--out``
(``report-rank0``, ``report-rank1``), each under its own lock."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.cli.test_profile_stalls import ROOT, fake_ncu

SLOW_STEPS = """
import time, torch_nsight
for _ in range(6):
    with torch_nsight.step():
        time.sleep(0.5)
"""


def test_two_ranks_write_one_folder_at_once(tmp_path: Path) -> None:
    ncu = fake_ncu(tmp_path, "ok")
    (tmp_path / "train.py").write_text(SLOW_STEPS)
    ranks = []
    for rank in (0, 1):
        env = {**os.environ, "PYTHONPATH": str(ROOT), "RANK": str(rank), "WORLD_SIZE": "2"}
        ranks.append(subprocess.Popen(
            [sys.executable, "-m", "torch_nsight", "profile", "--ncu", str(ncu), "--ranks",
             "0,1", "--steps", "3:4", "--out", "out", "--", sys.executable, "train.py"],
            cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            text=True))
    outputs = [process.communicate(timeout=300)[0] for process in ranks]
    assert [process.returncode for process in ranks] == [0, 0], outputs
    assert sorted(p.name for p in (tmp_path / "out").glob("report-rank*.ncu-rep")) == [
        "report-rank0.ncu-rep", "report-rank1.ncu-rep"]
    assert not list((tmp_path / "out").glob(".*.lock"))  # each lock went with its rank
