"""The user's process-global PyTorch switches that decide which kernels run.

A sweep profiles its model in a fresh child process, where every global switch is back at
its default: a user who enabled TF32 and sweeps a float32 model would profile a model
several times slower than the one they run. :func:`read_settings` captures the switches in
the user's process (JSON-ready) and :func:`apply_settings` sets them in the child.

Only process-global switches that change which kernels run (or how they are set up) are
carried: TF32 and float32 precision, reduced-precision reductions, cuDNN
(enabled, benchmark, deterministic, depthwise kernel), deterministic algorithms, the
scaled-dot-product-attention backends, the preferred BLAS and linear-algebra libraries,
the ``nn.MultiheadAttention`` fast path, and the default dtype (factories and default
inputs are built in the child). Per-thread state (autocast, the default device, grad mode)
is not: it belongs to the code the child runs.

The float32 precision switches are linked inside PyTorch. The legacy ``allow_tf32`` and
``set_float32_matmul_precision`` also write nodes of the ``fp32_precision`` tree of PyTorch
2.9 and later (``generic`` > ``cuda``/``mkldnn`` > ``matmul``/``conv``/``rnn``; a node set
to ``"none"`` inherits, and reads, its parent's value), and the legacy getters raise when
the two APIs were mixed. :func:`apply_settings` therefore sets the legacy switches first and
the ``fp32_precision`` nodes after them, parents before children, writing only a switch
whose current value differs: reading back gives what was read, and a node that inherited
its value still does (it follows a later change of its parent as it did). A legacy switch
that cannot be read (mixed APIs) is left out; the ``fp32_precision`` nodes carry the state.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from typing import Any

from torch_nsight.vocabulary import tf32_enabled

logger = logging.getLogger(__name__)

__all__ = ["read_settings", "apply_settings", "describe_settings", "SETTING_KEYS"]


def _backends() -> Any:
    import torch

    return torch.backends


def _attribute(path: str) -> tuple[Callable[[], Any], Callable[[Any], None]]:
    """Getter and setter of the attribute ``torch.backends.<path>``."""
    *parents, name = path.split(".")

    def owner() -> Any:
        obj = _backends()
        for part in parents:
            obj = getattr(obj, part)
        return obj

    def read() -> Any:
        value = getattr(owner(), name)
        if value is None:  # cudnn.benchmark_limit on a build without cuDNN
            raise AttributeError(f"torch.backends.{path} is not available")
        return value

    def write(value: Any) -> None:
        setattr(owner(), name, value)

    return read, write


def _function(getter: str, setter: str, owner: str = "backends.cuda"
              ) -> tuple[Callable[[], Any], Callable[[Any], None]]:
    """Getter and setter calling ``torch.<owner>.<getter>()`` and ``<setter>(value)``."""
    def module() -> Any:
        import torch

        obj: Any = torch
        for part in owner.split(".") if owner else ():
            obj = getattr(obj, part)
        return obj

    return (lambda: getattr(module(), getter)()), (lambda v: getattr(module(), setter)(v))


def _reduction(kind: str, split_k: bool) -> tuple[Callable[[], Any], Callable[[Any], None]]:
    """The fp16/bf16 reduced-precision reduction switch, or its split-K companion.

    Setting the main switch with a bool resets split-K to True, so each side is written as
    the (reduced precision, split-K) pair, keeping the other side's current value; except
    that turning reduced precision on turns split-K on too (PyTorch refuses split-K off
    with reduced precision on). The main switch is applied first.
    """
    main = f"allow_{kind}_reduced_precision_reduction"
    companion = f"{main}_split_k"

    def matmul() -> Any:
        return _backends().cuda.matmul

    def read() -> Any:
        return getattr(matmul(), companion if split_k else main)

    def write(value: Any) -> None:
        target = matmul()
        try:
            pair = (getattr(target, main), getattr(target, companion))
        except AttributeError:  # a PyTorch without the split-K switch takes a bool
            if split_k:
                raise
            setattr(target, main, value)
            return
        if split_k:
            setattr(target, main, (pair[0], value))
        else:
            setattr(target, main, (value, True if value else pair[1]))

    return read, write


def _deterministic(warn_only: bool) -> tuple[Callable[[], Any], Callable[[Any], None]]:
    import torch

    def read() -> Any:
        if warn_only:
            return torch.is_deterministic_algorithms_warn_only_enabled()
        return torch.are_deterministic_algorithms_enabled()

    def write(value: Any) -> None:
        if warn_only:
            torch.use_deterministic_algorithms(torch.are_deterministic_algorithms_enabled(),
                                               warn_only=bool(value))
        else:
            torch.use_deterministic_algorithms(
                bool(value), warn_only=torch.is_deterministic_algorithms_warn_only_enabled())

    return read, write


def _fill_uninitialized() -> tuple[Callable[[], Any], Callable[[Any], None]]:
    # the flag is a property of the module's class (torch/utils/deterministic.py): no stub has it
    def read() -> Any:
        import torch.utils.deterministic

        return torch.utils.deterministic.fill_uninitialized_memory  # type: ignore[attr-defined]

    def write(value: Any) -> None:
        import torch.utils.deterministic

        torch.utils.deterministic.fill_uninitialized_memory = (  # type: ignore[attr-defined]
            bool(value))

    return read, write


def _library(kind: str) -> tuple[Callable[[], Any], Callable[[Any], None]]:
    """``preferred_blas_library`` or ``preferred_linalg_library``, as lower-case names."""
    def function() -> Any:
        return getattr(_backends().cuda, f"preferred_{kind}_library")

    return (lambda: function()().name.lower()), (lambda v: function()(str(v)))


def _default_dtype() -> tuple[Callable[[], Any], Callable[[Any], None]]:
    import torch

    def read() -> Any:
        return str(torch.get_default_dtype()).removeprefix("torch.")

    def write(value: Any) -> None:
        dtype = getattr(torch, str(value), None)
        if not isinstance(dtype, torch.dtype):
            raise ValueError(f"{value!r} is not a torch dtype")
        torch.set_default_dtype(dtype)

    return read, write


@dataclass(frozen=True)
class _Setting:
    key: str
    access: Callable[[], tuple[Callable[[], Any], Callable[[Any], None]]]
    default: Any  # PyTorch's default, for describe_settings
    label: str = ""  # for describe_settings; "" when described with its linked switches


def _settings() -> tuple[_Setting, ...]:
    precision = [  # parents before children, so that inheriting children stay inheriting
        ("fp32_precision", "none"), ("cudnn.fp32_precision", "none"),
        ("mkldnn.fp32_precision", "none"), ("cuda.matmul.fp32_precision", "none"),
        ("cudnn.conv.fp32_precision", "tf32"), ("cudnn.rnn.fp32_precision", "tf32"),
        ("mkldnn.matmul.fp32_precision", "none"), ("mkldnn.conv.fp32_precision", "none"),
        ("mkldnn.rnn.fp32_precision", "none"),
    ]
    sdpa = [("flash", "flash SDPA"), ("mem_efficient", "mem-efficient SDPA"),
            ("math", "math SDPA"), ("cudnn", "cuDNN SDPA")]
    return (
        # legacy float32 switches first, then the fp32_precision tree
        _Setting("cuda.matmul.allow_tf32", lambda: _attribute("cuda.matmul.allow_tf32"),
                 False),
        _Setting("float32_matmul_precision",
                 lambda: _function("get_float32_matmul_precision",
                                   "set_float32_matmul_precision", ""), "highest"),
        _Setting("cudnn.allow_tf32", lambda: _attribute("cudnn.allow_tf32"), True),
        *(_Setting(key, partial(_attribute, key), default) for key, default in precision),
        _Setting("cuda.matmul.allow_fp16_reduced_precision_reduction",
                 lambda: _reduction("fp16", False), True, "fp16 reduced-precision reduction"),
        _Setting("cuda.matmul.allow_fp16_reduced_precision_reduction_split_k",
                 lambda: _reduction("fp16", True), True, "fp16 split-K reduction"),
        _Setting("cuda.matmul.allow_bf16_reduced_precision_reduction",
                 lambda: _reduction("bf16", False), True, "bf16 reduced-precision reduction"),
        _Setting("cuda.matmul.allow_bf16_reduced_precision_reduction_split_k",
                 lambda: _reduction("bf16", True), True, "bf16 split-K reduction"),
        _Setting("cuda.matmul.allow_fp16_accumulation",
                 lambda: _attribute("cuda.matmul.allow_fp16_accumulation"), False,
                 "fp16 accumulation"),
        _Setting("cudnn.enabled", lambda: _attribute("cudnn.enabled"), True, "cuDNN"),
        _Setting("cudnn.benchmark", lambda: _attribute("cudnn.benchmark"), False,
                 "cudnn.benchmark"),
        _Setting("cudnn.benchmark_limit", lambda: _attribute("cudnn.benchmark_limit"), 10,
                 "cudnn.benchmark_limit"),
        _Setting("cudnn.deterministic", lambda: _attribute("cudnn.deterministic"), False,
                 "cudnn.deterministic"),
        _Setting("cudnn.depthwise_kernel", lambda: _attribute("cudnn.depthwise_kernel"),
                 "auto", "cudnn.depthwise_kernel"),
        _Setting("deterministic_algorithms", lambda: _deterministic(False), False,
                 "deterministic algorithms"),
        _Setting("deterministic_algorithms_warn_only", lambda: _deterministic(True), False,
                 "deterministic algorithms warn-only"),
        _Setting("deterministic.fill_uninitialized_memory", _fill_uninitialized, True,
                 "deterministic fill of uninitialized memory"),
        *(_Setting(f"cuda.{name}_sdp",
                   partial(_function, f"{name}_sdp_enabled", f"enable_{name}_sdp"),
                   True, label) for name, label in sdpa),
        _Setting("cuda.math_sdp_fp16_bf16_reduction",
                 lambda: _function("fp16_bf16_reduction_math_sdp_allowed",
                                   "allow_fp16_bf16_reduction_math_sdp"), False,
                 "math SDPA fp16/bf16 reduction"),
        _Setting("cuda.preferred_blas_library", lambda: _library("blas"), "cublas",
                 "BLAS library"),
        _Setting("cuda.preferred_linalg_library", lambda: _library("linalg"), "default",
                 "linalg library"),
        _Setting("mha.fastpath", lambda: _function("get_fastpath_enabled",
                                                   "set_fastpath_enabled", "backends.mha"),
                 True, "MultiheadAttention fast path"),
        _Setting("default_dtype", _default_dtype, "float32", "default dtype"),
    )


_SETTINGS = _settings()
_BY_KEY = {setting.key: setting for setting in _SETTINGS}
SETTING_KEYS: tuple[str, ...] = tuple(_BY_KEY)
"""Every key :func:`read_settings` may return, in the order :func:`apply_settings` applies
them (this PyTorch may lack some)."""


@contextmanager
def _quiet(key: str) -> Iterator[None]:
    """Keep PyTorch's deprecation and beta warnings about a switch out of the user's way."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield
    for warning in caught:
        logger.debug("torch_nsight: %s: PyTorch warned: %s", key, warning.message)


def _read(setting: _Setting) -> tuple[bool, Any]:
    """(True, value), or (False, why) when this PyTorch lacks the switch or cannot read it."""
    try:
        with _quiet(setting.key):
            read, _ = setting.access()
            return True, read()
    except (AttributeError, ImportError) as err:
        return False, f"not in this PyTorch ({err})"
    except (RuntimeError, TypeError, ValueError) as err:  # mixed legacy/new TF32 APIs
        return False, f"unreadable: {err}"


def read_settings() -> dict[str, Any]:
    """Read the process-global PyTorch switches that decide which kernels run.

    Returns:
        Key (see :data:`SETTING_KEYS`, for example ``"cuda.matmul.allow_tf32"``,
        ``"float32_matmul_precision"``, ``"cudnn.benchmark"``, ``"cuda.flash_sdp"``) to
        value (bool, int or str: JSON-ready). Switches this PyTorch lacks, and legacy TF32
        switches that PyTorch refuses to read because the legacy and new precision APIs
        were mixed, are left out.
    """
    settings: dict[str, Any] = {}
    for setting in _SETTINGS:
        ok, value = _read(setting)
        if ok:
            settings[setting.key] = value
        else:
            logger.debug("torch_nsight: not reading %s: %s", setting.key, value)
    return settings


def apply_settings(settings: Mapping[str, Any]) -> list[str]:
    """Set the switches read by :func:`read_settings` (in another process, typically).

    Switches are applied in :data:`SETTING_KEYS` order (legacy float32 switches before the
    ``fp32_precision`` tree, parents before children), and only where the current value
    differs, so that reading them back gives ``settings``.

    Args:
        settings: Key to value, as returned by :func:`read_settings`; a subset is fine.

    Returns:
        The keys not applied, in the order given: unknown keys, switches this PyTorch lacks
        and values it refused (the refusals are logged as warnings, the rest at debug).

    Raises:
        TypeError: If ``settings`` is not a mapping.
    """
    if not isinstance(settings, Mapping):
        raise TypeError(f"settings must be a mapping, got {type(settings).__name__}")
    skipped = set()
    for key in settings:
        if key not in _BY_KEY:
            logger.debug("torch_nsight: skipping unknown setting %r", key)
            skipped.add(key)
    for setting in _SETTINGS:
        key = setting.key
        if key not in settings or settings[key] is None:
            continue
        value = settings[key]
        readable, current = _read(setting)
        if readable and current == value:
            continue
        if not readable and current.startswith("not in this PyTorch"):
            logger.debug("torch_nsight: skipping setting %s: %s", key, current)
            skipped.add(key)
            continue
        try:
            with _quiet(key):
                _, write = setting.access()
                write(value)
        except (AttributeError, ImportError) as err:
            logger.debug("torch_nsight: skipping setting %s: not in this PyTorch (%s)", key, err)
            skipped.add(key)
        except (RuntimeError, TypeError, ValueError) as err:
            logger.warning("torch_nsight: could not set %s to %r: %s", key, value, err)
            skipped.add(key)
        else:
            logger.debug("torch_nsight: set %s to %r", key, value)
    return [key for key in settings if key in skipped]


def _describe_precision(settings: Mapping[str, Any]) -> list[str]:
    """The float32 precision switches, summarised by their effect."""
    parts = []
    matmul = tf32_enabled(settings, "matmul")
    if matmul:
        parts.append("TF32 matmul on")
    precision = settings.get("float32_matmul_precision")
    if precision not in (None, "highest") and not (precision == "high" and matmul):
        parts.append(f"float32 matmul precision {precision}")
    conv, rnn = tf32_enabled(settings, "conv"), tf32_enabled(settings, "rnn")
    if conv is False and rnn is False:
        parts.append("TF32 cuDNN off")
    elif conv is False:
        parts.append("TF32 cuDNN conv off")
    elif rnn is False:
        parts.append("TF32 cuDNN RNN off")
    implied = {"high": "tf32", "medium": "bf16"}.get(str(precision))
    for op in ("matmul", "conv", "rnn"):
        value = settings.get(f"mkldnn.{op}.fp32_precision")
        if value in ("tf32", "bf16") and not (op == "matmul" and value == implied):
            parts.append(f"oneDNN {op} {value}")
    return parts


def describe_settings(settings: Mapping[str, Any]) -> str:
    """A one-line summary of the switches in ``settings`` that differ from the defaults.

    Args:
        settings: As returned by :func:`read_settings`.

    Returns:
        For example ``"TF32 matmul on, cudnn.benchmark on"``; ``""`` when every switch has
        PyTorch's default value. The float32 precision switches are summarised by their
        effect (``TF32 matmul on``, ``TF32 cuDNN off``, ``oneDNN matmul bf16``).

    Raises:
        TypeError: If ``settings`` is not a mapping.
    """
    if not isinstance(settings, Mapping):
        raise TypeError(f"settings must be a mapping, got {type(settings).__name__}")
    parts = _describe_precision(settings)
    for setting in _SETTINGS:
        value = settings.get(setting.key)
        if not setting.label or value is None or value == setting.default:
            continue
        if isinstance(value, bool):
            parts.append(f"{setting.label} {'on' if value else 'off'}")
        else:
            parts.append(f"{setting.label} {value}")
    return ", ".join(parts)
