"""The contract between ``torch-nsight profile`` and the user's script (environment.py): a
choice of steps parsed once, one typed ScriptEnv written and read back, the variables named
in one place and read nowhere else."""

from __future__ import annotations

import ast
import logging
import re
from pathlib import Path

import pytest

from torch_nsight import environment
from torch_nsight.environment import (
    APPLY_ENV,
    INSTRUMENT_ENV,
    REPLICATE_ENV,
    SCRIPT_VARIABLES,
    STATUS_ENV,
    STEPS_ENV,
    TIMELINE_ENV,
    ScriptEnv,
    Steps,
)
from torch_nsight.errors import StepsError, TorchNsightError
from torch_nsight.verify_exchange import FixSpec

PACKAGE = Path(__file__).resolve().parents[1] / "torch_nsight"
CONTRACT = PACKAGE / "environment.py"
#: The one module of the command line that turns the user's text into Steps.
CLI_READER = PACKAGE / "cli" / "arguments.py"


@pytest.mark.parametrize(("text", "steps"), [
    ("3", Steps(3, 4)), ("10:12", Steps(10, 12)), ("0:1", Steps(0, 1)), ("5:", Steps(5, None)),
    (":4", Steps(0, 4)), (" 7:9 ", Steps(7, 9)),
])
def test_a_choice_of_steps_is_read_once_into_a_value(text: str, steps: Steps) -> None:
    assert Steps.parse(text) == steps
    assert Steps.parse(str(steps)) == steps  # written A:B (A: without an end), read back


def test_what_a_choice_of_steps_holds() -> None:
    closed, open_ended = Steps(10, 12), Steps(5, None)
    assert (closed.count, closed.last, str(closed)) == (2, 11, "10:12")
    assert [i for i in range(20) if i in closed] == [10, 11]
    assert (open_ended.count, open_ended.last, str(open_ended)) == (None, None, "5:")
    assert 10**9 in open_ended and 4 not in open_ended and "5" not in open_ended
    with pytest.raises(AttributeError):
        closed.first = 3  # type: ignore[misc]


@pytest.mark.parametrize(("text", "message"), [
    ("-1:2", "steps '-1:2': step indices start at 0 (torch_nsight.step() numbers the loop's "
             "steps 0, 1, 2...); there is no step from the end"),
    ("-1", "steps '-1': step indices start at 0"),
    ("5:3", "steps '5:3': need 0 <= A < B (A:B chooses steps A to B-1)"),
    ("3:3", "steps '3:3': need 0 <= A < B"),
    ("abc", "steps 'abc': expected N, A:B or A: (step indices from 0, B excluded)"),
    ("1:x", "steps '1:x': expected N, A:B or A:"),
    ("", "steps '': expected N, A:B or A:"),
])
def test_a_bad_choice_of_steps_says_what_is_wrong(text: str, message: str) -> None:
    with pytest.raises(StepsError) as caught:
        Steps.parse(text)
    assert str(caught.value).startswith(message)
    assert isinstance(caught.value, TorchNsightError) and isinstance(caught.value, ValueError)


def test_steps_made_in_code_are_checked_too() -> None:
    with pytest.raises(StepsError, match="steps -1:2: step indices start at 0"):
        Steps(-1, 2)
    with pytest.raises(StepsError, match="need 0 <= A < B"):
        Steps(5, 3)
    with pytest.raises(TypeError, match="ints"):
        Steps(1.5, 3)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="ints"):
        Steps(True, 3)


FULL = ScriptEnv(steps=Steps(10, 12), status=Path("/tmp/out/report.status.jsonl"),
                 replicate=True, rehearsal=True, instrument=False,
                 timeline=Path("/tmp/out"),
                 fixes=(FixSpec("pad_linear", "lm_head", {"multiple": 64}), FixSpec("tf32"),
                        FixSpec("compile", "layers.*.mlp", {"mode": "reduce-overhead",
                                                             "fullgraph": True})),
                 alternate=True, timing=Path("/tmp/verify/steps.json"))


@pytest.mark.parametrize("script", [
    ScriptEnv(), FULL, ScriptEnv(steps=Steps(5, None), instrument=True),
    ScriptEnv(steps=Steps(0, 1), status=Path("relative/status.jsonl"), replicate=True),
    ScriptEnv(timeline=Path("/tmp/t"), steps=Steps(3, 5)),
    ScriptEnv(steps=Steps(12, 14), carry_last=True),
], ids=["empty", "full", "open-ended", "profile", "timeline", "carry-last"])
def test_what_the_command_writes_the_script_reads_back(script: ScriptEnv) -> None:
    written = script.to_env()
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in written.items())
    assert set(written) <= set(SCRIPT_VARIABLES)
    assert ScriptEnv.from_env(written) == script
    # what the script is given on top of the command's own environment
    assert ScriptEnv.from_env(script.environment({"PATH": "/bin"})) == script


def test_the_variables_as_they_are_written() -> None:
    assert ScriptEnv().to_env() == {}
    written = FULL.to_env()
    assert list(written) == [n for n in SCRIPT_VARIABLES if n in written]
    assert written == {
        TIMELINE_ENV: "/tmp/out", STEPS_ENV: "10:12", REPLICATE_ENV: "1",
        STATUS_ENV: "/tmp/out/report.status.jsonl", "TORCH_NSIGHT_REHEARSAL": "1",
        INSTRUMENT_ENV: "0",
        APPLY_ENV: '[{"fix": "pad_linear", "multiple": 64, "target": "lm_head"}, '
                   '{"fix": "tf32", "target": ""}, {"fix": "compile", "fullgraph": true, '
                   '"mode": "reduce-overhead", "target": "layers.*.mlp"}]',
        "TORCH_NSIGHT_VERIFY_ALTERNATE": "1", "TORCH_NSIGHT_TIMING": "/tmp/verify/steps.json"}
    assert FULL.shown() == {k: v for k, v in written.items() if k != STATUS_ENV}


def test_what_a_person_writes_by_hand_is_read_too() -> None:
    script = ScriptEnv.from_env({STEPS_ENV: "12", INSTRUMENT_ENV: " ON ", APPLY_ENV: "tf32",
                                 STATUS_ENV: "", "PATH": "/bin"})
    assert script == ScriptEnv(steps=Steps(12, 13), instrument=True, fixes=(FixSpec("tf32"),))
    assert script.refused == ()


def test_a_malformed_value_is_left_out_with_a_warning_never_raised(
        caplog: pytest.LogCaptureFixture) -> None:
    environ = {STEPS_ENV: "x:y", INSTRUMENT_ENV: "sometimes", APPLY_ENV: "[{",
               REPLICATE_ENV: "twice", TIMELINE_ENV: "/tmp/t"}
    with caplog.at_level(logging.WARNING, logger="torch_nsight"):
        script = ScriptEnv.from_env(environ)
        again = ScriptEnv.from_env(environ)
    assert script == again == ScriptEnv(timeline=Path("/tmp/t"))
    assert [name for name, _ in script.refused] == [STEPS_ENV, REPLICATE_ENV, INSTRUMENT_ENV,
                                                    APPLY_ENV]
    assert script.refusal(STEPS_ENV) == "steps 'x:y': expected N, A:B or A: (step indices " \
                                        "from 0, B excluded)"
    assert "not valid JSON" in str(script.refusal(APPLY_ENV))
    assert script.refusal(TIMELINE_ENV) is None
    warned = [r.getMessage() for r in caplog.records]
    assert len(warned) == 4  # once per process, though every step reads them
    assert any("ignoring TORCH_NSIGHT_INSTRUMENT='sometimes': expected 1 or 0" in line
               for line in warned)


def test_a_run_that_must_not_inherit_the_variables_drops_them() -> None:
    base = {"PATH": "/bin", APPLY_ENV: "tf32", TIMELINE_ENV: "/tmp/t", STEPS_ENV: "1:2"}
    told = ScriptEnv(steps=Steps(3, 13), instrument=False)
    assert told.environment(base) == {**base, STEPS_ENV: "3:13", INSTRUMENT_ENV: "0"}
    assert told.environment(base, inherit=False) == {"PATH": "/bin", STEPS_ENV: "3:13",
                                                     INSTRUMENT_ENV: "0"}


def test_the_command_tells_the_script_through_script_env(tmp_path: Path) -> None:
    from torch_nsight.collect.parent.bare import bare_env
    from torch_nsight.collect.parent.script import plan_script, plan_timeline

    plan = plan_script(["python", "train.py"], tmp_path / "report.ncu-rep", ncu="ncu",
                       metric_set="fast", steps=Steps(10, 12), environ={"PATH": "/bin"})
    assert ScriptEnv.from_env(plan.env) == plan.script == ScriptEnv(
        steps=Steps(10, 12), status=tmp_path / "report.status.jsonl", replicate=True,
        replicate_ops=True)
    # a single-pass set measures every launch: its repeated op calls are not left out
    single = plan_script(["python", "train.py"], tmp_path / "report.ncu-rep", ncu="ncu",
                         metric_set="duration", steps=Steps(10, 12), environ={})
    assert (single.script.replicate, single.script.replicate_ops) == (True, False)
    assert (plan.steps, plan.n_steps, plan.replicate, plan.timeline) == (Steps(10, 12), 2,
                                                                         True, False)
    timeline = plan_timeline(["python", "train.py"], tmp_path, steps=Steps(4, None),
                             environ={})
    assert ScriptEnv.from_env(timeline.env).timeline == tmp_path.resolve()
    assert timeline.n_steps is None and timeline.timeline
    bare = bare_env({APPLY_ENV: "tf32", REPLICATE_ENV: "1", "PATH": "/bin"}, Steps(3, 13),
                    [FixSpec("channels_last")], tmp_path / "t.json", tmp_path / "s.jsonl",
                    alternate=True)
    assert ScriptEnv.from_env(bare) == ScriptEnv(
        steps=Steps(3, 13), timing=tmp_path / "t.json", status=tmp_path / "s.jsonl",
        instrument=False, fixes=(FixSpec("channels_last"),), alternate=True)


# --- one place: the rules, read from the source -------------------------------------------

def _modules() -> dict[Path, ast.Module]:
    return {path: ast.parse(path.read_text(encoding="utf-8"), str(path))
            for path in sorted(PACKAGE.rglob("*.py"))}


def _where(path: Path, node: ast.AST) -> str:
    return f"{path.relative_to(PACKAGE.parent)}:{getattr(node, 'lineno', '?')}"


def test_the_variable_names_are_spelled_in_one_module() -> None:
    spelled = [_where(path, node) for path, tree in _modules().items() if path != CONTRACT
               for node in ast.walk(tree)
               if isinstance(node, ast.Constant) and isinstance(node.value, str)
               and re.fullmatch(r"TORCH_NSIGHT_[A-Z0-9_]+", node.value)]
    assert spelled == [], "name the variable in torch_nsight/environment.py and import it"


SCRIPT_NAMES = {name for name in dir(environment)
                if getattr(environment, name) in SCRIPT_VARIABLES and name.endswith("_ENV")}


def _names_a_script_variable(node: ast.AST | None) -> bool:
    return (isinstance(node, ast.Name) and node.id in SCRIPT_NAMES) or (
        isinstance(node, ast.Attribute) and node.attr in SCRIPT_NAMES)


def _reads_or_writes_a_script_variable(node: ast.AST) -> bool:
    """``env[STEPS_ENV]``, ``env.get(STEPS_ENV)``, ``STEPS_ENV in env``, ``{STEPS_ENV: ...}``
    (a name used in a message is fine)."""
    if isinstance(node, ast.Subscript):
        return _names_a_script_variable(node.slice)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args:
        return node.func.attr in ("get", "pop", "setdefault", "setenv", "delenv", "getenv") \
            and _names_a_script_variable(node.args[0])
    if isinstance(node, ast.Compare) and any(isinstance(op, (ast.In, ast.NotIn))
                                             for op in node.ops):
        return _names_a_script_variable(node.left)
    if isinstance(node, ast.Dict):
        return any(_names_a_script_variable(key) for key in node.keys)
    return False


def test_only_script_env_reads_and_writes_the_scripts_variables() -> None:
    assert {"STEPS_ENV", "STATUS_ENV", "APPLY_ENV", "TIMELINE_ENV"} <= SCRIPT_NAMES
    raw = [_where(path, node) for path, tree in _modules().items() if path != CONTRACT
           for node in ast.walk(tree) if _reads_or_writes_a_script_variable(node)]
    assert raw == [], "read ScriptEnv.from_env(environ), write ScriptEnv(...).to_env()"


def _splits_steps(node: ast.AST) -> bool:
    """``steps.split(":")``, ``text.partition(":")`` on anything named for steps."""
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("split", "rsplit", "partition", "rpartition")
            and bool(node.args) and isinstance(node.args[0], ast.Constant)
            and node.args[0].value == ":" and "step" in ast.unparse(node.func.value).lower())


def _parses_steps(node: ast.AST) -> bool:
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and node.func.attr == "parse" and ast.unparse(node.func.value) == "Steps")


def test_a_choice_of_steps_is_parsed_in_one_place() -> None:
    found: dict[str, list[str]] = {"split": [], "parse": [], "sentinel": []}
    for path, tree in _modules().items():
        if "2**62" in path.read_text(encoding="utf-8").replace(" ", ""):
            found["sentinel"].append(str(path.relative_to(PACKAGE.parent)))
        for node in ast.walk(tree):
            if _splits_steps(node) and path != CONTRACT:
                found["split"].append(_where(path, node))
            if _parses_steps(node) and path not in (CONTRACT, CLI_READER):
                found["parse"].append(_where(path, node))
    assert found == {"split": [], "parse": [], "sentinel": []}, (
        "take a Steps: Steps.parse reads the user's text (cli/arguments.read_steps) and the "
        "script's variable (ScriptEnv.from_env)")
