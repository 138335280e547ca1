"""A model class defined in ``__main__`` (a script, as in a notebook) reaches the child."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = textwrap.dedent('''
    import json, sys
    import torch
    import torch_nsight

    class MainModel(torch.nn.Module):          # lives in __main__: pickled by value
        def __init__(self, width):
            super().__init__()
            self.fc = torch.nn.Linear(width, width)

        def forward(self, x):
            return torch.relu(self.fc(x))

    def build_factory(width):
        def factory():                          # a closure over a local
            return MainModel(width)
        return factory

    profile = torch_nsight.sweep(
        {"instance": MainModel(8), "factory": build_factory(8)},
        [(2, 8)], make_inputs=lambda shape: torch.ones(shape),
        profiler=None, quiet=True)
    again = torch_nsight.sweep(MainModel(4), [(1, 4)], profiler=None, quiet=True)
    assert again.results[0]["status"] == "ok"   # a second sweep in the same script
    print(json.dumps([[r["variant"], r["status"], r["outputs"], r["error"]]
                      for r in profile.results]))
''')


@pytest.mark.slow
def test_main_module_classes_closures_and_lambdas(tmp_path: Path) -> None:
    script = tmp_path / "user script.py"
    script.write_text(SCRIPT)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]))
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          env=env, cwd=tmp_path, timeout=120)
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(proc.stdout.strip().splitlines()[-1])
    assert rows == [["instance", "ok", "(2, 8) float32", None],
                    ["factory", "ok", "(2, 8) float32", None]]
