"""Detecting an attached profiler from the environment."""

from __future__ import annotations

import logging

import pytest

from torch_nsight.capture import detect_profiler, resolve_enabled
from torch_nsight.environment import INSTRUMENT_ENV


@pytest.mark.parametrize(
    "name",
    [
        "NVTX_INJECTION64_PATH",
        "CUDA_INJECTION64_PATH",
        "NV_NSIGHT_INJECTION_TRANSPORT_TYPE",
        "NV_TPS_LAUNCH_TOKEN",
        "NV_COMPUTE_PROFILER_PERFWORKS_DIR",
        "NVIDIA_PROCESS_INJECTION_CRASH_REPORTING",
        "NV_NSIGHT_INJECTION_PORT_RANGE_BEGIN",
        "NSYS_PROFILING_SESSION_ID",
    ],
)
def test_each_profiler_variable_is_detected(name: str) -> None:
    assert detect_profiler({"HOME": "/root", name: "1"}) == name


def test_plain_environment_is_not_profiled() -> None:
    env = {"HOME": "/root", "PATH": "/usr/bin", "LD_PRELOAD": "libfoo.so",
           "CUDA_VISIBLE_DEVICES": "0", "NVIDIA_VISIBLE_DEVICES": "all", "NSYS": "x"}
    assert detect_profiler(env) is None


def test_empty_injection_path_is_ignored() -> None:
    assert detect_profiler({"NVTX_INJECTION64_PATH": ""}) is None


@pytest.mark.parametrize(
    ("enabled", "env", "expected"),
    [
        (True, {}, True),
        (False, {"NV_TPS_LAUNCH_TOKEN": "x", INSTRUMENT_ENV: "1"}, False),
        (True, {INSTRUMENT_ENV: "0"}, True),
        (None, {INSTRUMENT_ENV: "1"}, True),
        (None, {INSTRUMENT_ENV: " ON "}, True),
        (None, {INSTRUMENT_ENV: "0", "NSYS_PROFILING_SESSION_ID": "3"}, False),
        (None, {INSTRUMENT_ENV: "false", "NV_TPS_LAUNCH_TOKEN": "x"}, False),
        (None, {"NV_TPS_LAUNCH_TOKEN": "x"}, True),
        (None, {}, False),
    ],
)
def test_resolve_enabled_precedence(enabled: bool | None, env: dict, expected: bool) -> None:
    on, reason = resolve_enabled(enabled, env)
    assert on is expected
    assert reason


def test_reason_names_the_variable_found() -> None:
    assert "NV_TPS_LAUNCH_TOKEN" in resolve_enabled(None, {"NV_TPS_LAUNCH_TOKEN": "x"})[1]
    assert INSTRUMENT_ENV in resolve_enabled(None, {})[1]


def test_unknown_switch_value_is_ignored_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="torch_nsight"):
        on, _ = resolve_enabled(None, {INSTRUMENT_ENV: "maybe", "NV_TPS_LAUNCH_TOKEN": "x"})
    assert on
    assert "maybe" in caplog.text


def test_enabled_must_be_bool_or_none() -> None:
    with pytest.raises(TypeError, match="enabled"):
        resolve_enabled(1, {})  # type: ignore[arg-type]
