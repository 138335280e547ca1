"""Identical siblings: detection, the check, the replica ranges, and the row expansion."""

from __future__ import annotations

import pandas as pd
import pytest
import torch

from torch_nsight.analyze import expand_replicas
from torch_nsight.capture import RecordingEmitter, instrument
from torch_nsight.capture.replicas import replica as replicate
from torch_nsight.capture.replicas.replica import ReplicaMarkers
from torch_nsight.capture.replicas.siblings import candidate_groups, check_siblings

from .models import Stack


def run(model: torch.nn.Module, backward: bool, x: torch.Tensor):
    def once() -> None:
        if backward:
            model(x).float().mean().backward()
            model.zero_grad(set_to_none=True)
        else:
            with torch.no_grad():
                model(x)
    return once


def test_candidate_groups_are_static_twins() -> None:
    model = Stack(3)
    model.h[2].fc1 = torch.nn.Linear(16, 32, bias=False)  # not a twin any more
    assert candidate_groups(model) == [["h.0", "h.1"], ["h.0.n1", "h.0.n2"],
                                       ["h.1.n1", "h.1.n2"], ["h.2.n1", "h.2.n2"]]


def test_forward_check_replicates_the_stack_and_nested_twins() -> None:
    model = Stack(4)
    verdict = check_siblings(model, run(model, False, torch.randn(2, 16)), backward=False,
                             cuda=False)
    assert verdict["status"] == "replicated" and verdict["mismatches"] == []
    groups = [(g["representative"], g["replicas"]) for g in verdict["groups"]]
    # outer group first; twins inside replicas are covered by their representative
    assert groups == [("h.0", ["h.1", "h.2", "h.3"]), ("h.0.n1", ["h.0.n2"])]
    assert set(verdict["groups"][0]["time_ms"]) == {"h.0", "h.1", "h.2", "h.3"}


def test_a_twin_that_runs_differently_is_profiled_on_its_own() -> None:
    model = Stack(4)
    model.h[2].extra = True
    verdict = check_siblings(model, run(model, True, torch.randn(2, 16)), backward=True,
                             cuda=False)
    outer = verdict["groups"][0]
    # h.0 gets no input gradient and h.2 runs one more op: both profiled themselves
    assert (outer["representative"], outer["replicas"]) == ("h.1", ["h.3"])
    (line,) = [m for m in verdict["mismatches"] if "h.0 (" in m]
    assert "h.1, h.3 (1 call(s), " in line and "h.2 (1 call(s), " in line
    # h.0's input needs no gradient; h.2 runs one more op
    assert line.startswith("twins run differently (inputs, launches, gradients): ")
    # each differing twin is set against the largest group, at its first differing launch
    assert "first difference: h.0 call 1 launch 1 of " in line
    assert "; h.2 call 1 launch 6 of 7: Tensor.mul(" in line


CHECK_IN_A_FRESH_PROCESS = """
import sys
import torch
from tests.collect.models import Stack
from torch_nsight.capture.replicas.siblings import check_siblings

model = Stack(3)
x = torch.randn(2, 16)

def once():
    model(x).float().mean().backward()

before = "torch._dynamo" in sys.modules
verdict = check_siblings(model, once, backward=True, cuda=False)
assert verdict["status"] == "replicated", verdict
print(before, "torch._dynamo" in sys.modules)
"""


@pytest.mark.slow
def test_the_check_does_not_import_dynamo() -> None:
    # a TorchDispatchMode would import torch._dynamo on first entry (a second or more)
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    proc = subprocess.run([sys.executable, "-c", CHECK_IN_A_FRESH_PROCESS], cwd=root,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["False", "False"]


def test_no_twins() -> None:
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Linear(8, 4))
    assert check_siblings(model, run(model, False, torch.randn(1, 4)), backward=False,
                          cuda=False)["status"] == "none"


def test_replica_ranges_follow_the_replicas_own_ranges(monkeypatch) -> None:
    import nvtx

    recorder = RecordingEmitter()
    counter = iter(range(1000))

    def start_range(message, domain=None):
        handle = next(counter)
        recorder.events.append((handle, "start", f"{message}@{domain}"))
        return handle

    monkeypatch.setattr(nvtx, "start_range", start_range)
    monkeypatch.setattr(nvtx, "end_range",
                        lambda handle: recorder.events.append((handle, "end", "")))
    model = Stack(3)
    markers = ReplicaMarkers(recorder)
    x = torch.randn(2, 16, requires_grad=True)
    with instrument(model, enabled=True, emitter=markers):
        assert not any(m._forward_pre_hooks or m._backward_hooks or m._backward_pre_hooks
                       for m in model.modules())  # no module hook changes the graph
        with markers.marking(["h.1", "h.2"]):
            run(model, True, x)()
        run(model, True, x)()  # after marking: no replica range
    events = [(kind, message) for _, kind, message in recorder.events]
    replica = f"{replicate.REPLICA_MESSAGE}@torch_nsight"
    starts = [i for i, e in enumerate(events) if e == ("start", replica)]
    ends = [i for i, e in enumerate(events) if e[0] == "end"]
    # h.1, h.2: forward and backward each, just around the module's own range
    assert [events[i + 1] for i in starts] == [("push", "h.1"), ("push", "h.2"),
                                                ("push", "bwd:h.2"), ("push", "bwd:h.1")]
    assert [events[i - 1] for i in ends] == [("pop", "h.1"), ("pop", "h.2"),
                                              ("pop", "bwd:h.2"), ("pop", "bwd:h.1")]
    assert sorted(h for h, kind, _ in recorder.events if kind == "start") == \
        sorted(h for h, kind, _ in recorder.events if kind == "end")
    assert ends[-1] < len(events) // 2 and not markers.open


def test_replica_ranges_left_open_end_with_the_marking(monkeypatch) -> None:
    import nvtx

    ended: list[int] = []
    monkeypatch.setattr(nvtx, "start_range", lambda message, domain=None: 7)
    monkeypatch.setattr(nvtx, "end_range", ended.append)
    markers = ReplicaMarkers(RecordingEmitter())
    push, pop = markers.bind("bwd:h.1")
    with markers.marking(["h.1"]):
        push()  # a backward range that a device thread closes only later
    assert ended == [7]
    pop()  # closes the module range only: the replica range ended already
    assert ended == [7]


def kernels() -> pd.DataFrame:
    rows = []
    for shape in ("1x16", "2x16"):
        for run_index in (0, 1):
            for module, direction, stack in [
                ("Stack", "fwd", ("Stack",)),
                ("h.0.fc1", "fwd", ("Stack", "h.0", "h.0.fc1")),
                ("h.0.n1", "fwd", ("Stack", "h.0", "h.0.n1")),
                ("h.0.n1", "bwd", ("bwd:Stack", "bwd:h.0", "bwd:h.0.n1")),
                ("h.10", "fwd", ("Stack", "h.10")),  # a prefix look-alike, not inside h.1
            ]:
                rows.append({"variant": None, "shape": shape, "run": run_index,
                             "module": module, "direction": direction,
                             "module_path": "/".join(m.removeprefix("bwd:") for m in stack),
                             "range_stack": stack, "kernel": f"k_{module}",
                             "duration_ns": 100.0})
    return pd.DataFrame(rows)


def test_expand_replicas_nested_scoped_and_renamed() -> None:
    groups = [{"variant": "", "shape": "1x16", "representative": "h.0", "replicas": ["h.1"]},
              {"variant": "", "shape": "1x16", "representative": "h.0.n1",
               "replicas": ["h.0.n2"]}]
    out = expand_replicas(kernels(), groups)
    small = out[out["shape"] == "1x16"]
    assert len(out[out["shape"] == "2x16"]) == 10  # other shape untouched
    # per run: h.0 (3 rows) + h.0.n2 (2) measured or nested-copied, h.1 gets all 5
    by_module = small.groupby("module").size().to_dict()
    assert by_module == {"Stack": 2, "h.0.fc1": 2, "h.0.n1": 4, "h.0.n2": 4, "h.1.fc1": 2,
                         "h.1.n1": 4, "h.1.n2": 4, "h.10": 2}
    n2 = small[small["module"] == "h.1.n2"]
    assert set(n2["replicated_from"]) == {"h.0.n1"}  # where the kernel was measured
    bwd = n2[n2["direction"] == "bwd"].iloc[0]
    assert bwd["range_stack"] == ("bwd:Stack", "bwd:h.1", "bwd:h.1.n2")
    assert bwd["module_path"] == "Stack/h.1/h.1.n2"
    assert small[small["module"] == "h.0.fc1"]["replicated_from"].isna().all()
    assert set(small[small["module"] == "h.1.fc1"]["replicated_from"]) == {"h.0.fc1"}


def test_expand_skips_what_was_profiled_anyway() -> None:
    df = kernels()
    profiled = df[(df["module"] == "h.0.fc1") & (df["run"] == 0)].assign(
        module="h.1.fc1", module_path="Stack/h.1/h.1.fc1",
        range_stack=[("Stack", "h.1", "h.1.fc1")] * 2)
    df = pd.concat([df, profiled], ignore_index=True)
    out = expand_replicas(df, [{"variant": None, "shape": "1x16", "representative": "h.0",
                                "replicas": ["h.1"]}])
    h1 = out[(out["shape"] == "1x16") & out["module"].str.startswith("h.1.")]
    # run 0 forward was profiled: only the missing (run, direction) pairs are copied
    assert sorted(zip(h1["run"], h1["direction"], h1["replicated_from"].notna(),
                      strict=True)) == [(0, "bwd", True), (0, "fwd", False),
                                        (1, "bwd", True), (1, "fwd", True), (1, "fwd", True)]


@pytest.mark.parametrize("groups", [[], [{"variant": "x", "shape": "1x16",
                                          "representative": "h.0", "replicas": ["h.1"]}]])
def test_expand_without_matching_groups_adds_only_the_column(groups) -> None:
    out = expand_replicas(kernels(), groups)
    assert len(out) == 20 and out["replicated_from"].isna().all()


def test_an_internal_failure_stops_the_check_and_never_reaches_the_step(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    from torch_nsight.capture.replicas import siblings

    def broken(value: object) -> object:
        raise TypeError("unhashable type: non-nested SymInt")

    monkeypatch.setattr(siblings, "_arg_signature", broken)
    model = Stack(3)
    x = torch.randn(2, 16)
    verdict = check_siblings(model, run(model, True, x), backward=True, cuda=False)
    assert verdict["status"] == "error" and verdict["groups"] == []
    assert verdict["error"] == "TypeError: unhashable type: non-nested SymInt"
    stopped = [r for r in caplog.records if "sibling check stopped" in r.getMessage()]
    assert len(stopped) == 1  # said once, however many calls failed


def test_a_compiled_model_is_not_watched() -> None:
    model = Stack(3)
    compiled = torch.compile(model, backend="eager")
    verdict = check_siblings(compiled, run(compiled, False, torch.randn(2, 16)),
                             backward=False, cuda=False)
    assert verdict == {"status": "none", "groups": [], "mismatches": [
        "the model runs torch.compile graphs: every module is profiled"]}


class _Residual(torch.nn.Module):
    """A residual block as torchvision's ResNet writes it: in-place ReLUs on the outputs of
    twin norms (the check watches twins), an in-place add."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(16, 16)
        self.norm1 = torch.nn.LayerNorm(16)
        self.norm2 = torch.nn.LayerNorm(16)
        self.relu = torch.nn.ReLU(inplace=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.relu(self.norm1(self.fc(x)))
        out = self.norm2(out)
        out += x
        return self.relu(out)


def test_in_place_ops_after_a_watched_module_still_run_and_twins_replicate() -> None:
    model = torch.nn.Sequential(*[_Residual() for _ in range(3)])
    x = torch.randn(4, 16, requires_grad=True)
    verdict = check_siblings(model, run(model, True, x), backward=True, cuda=False)
    assert verdict["status"] == "replicated", verdict
    assert verdict["groups"][0]["representative"] == "0"
    assert verdict["groups"][0]["replicas"] == ["1", "2"]
