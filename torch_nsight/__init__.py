"""torch_nsight: make NVIDIA Nsight profilers speak PyTorch.

* :func:`instrument` puts an NVTX range around every submodule (forward and backward), so
  any NVTX-aware profiler attributes each kernel to its module path.
* :func:`sweep` profiles a model across input shapes under Nsight Compute in one re-launch.
* :func:`timeline` takes the cheap first look: a few iterations per shape under PyTorch's
  profiler, kernels attributed to modules, GPU idle and launch-bound steps found.
* :func:`load` reads ``.ncu-rep`` reports into a :class:`Profile`: kernels joined to the
  module tree and classified on the roofline.

Every public name loads on first use: training code that only instruments pays nothing for
the reporter (pandas), and the reporter never imports torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

# The error types, and errors.__all__ to list them in this module's __all__ below (mypy
# learns exported names from this import; it cannot read `*errors.__all__`).
from torch_nsight.errors import *  # noqa: F403
from torch_nsight.errors import __all__
from torch_nsight.version import __version__

if TYPE_CHECKING:
    # from the defining module: in the import cycle mypy would take capture's `instrument`
    # for the submodule of that name
    from torch_nsight.capture.front.instrument import Instrumentation, instrument
    from torch_nsight.capture.script.step import step
    from torch_nsight.collect import sweep
    from torch_nsight.collect.timeline import timeline
    from torch_nsight.loading import load
    from torch_nsight.profile import Profile

__all__ = [
    "instrument",
    "Instrumentation",
    "step",
    "sweep",
    "timeline",
    "load",
    "Profile",
    *__all__,
    "__version__",
]

_LAZY = {"instrument": "torch_nsight.capture", "Instrumentation": "torch_nsight.capture",
         "step": "torch_nsight.capture.script.step",
         "sweep": "torch_nsight.collect", "timeline": "torch_nsight.collect.timeline",
         "load": "torch_nsight.loading",
         "Profile": "torch_nsight.profile"}
_GIVE_PROFILES = ("load", "sweep", "timeline", "Profile")


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(_LAZY[name]), name)
        if name in _GIVE_PROFILES:  # a notebook shows their Profiles as HTML tables
            importlib.import_module("torch_nsight.render.notebook")
        globals()[name] = value
        return value
    raise AttributeError(f"module 'torch_nsight' has no attribute {name!r}")


def __dir__() -> list[str]:
    """The public names, the lazily imported ones included (``dir(torch_nsight)``)."""
    return sorted({*globals(), *__all__})
