"""What ``torch-nsight demo`` needs, shipped inside the package so that it works from a wheel.

* :mod:`torch_nsight.demo.llama`: the demo model, :class:`~torch_nsight.demo.llama.LlamaBlock`
  (imports torch; import it only to profile live).
* ``llama_block_fwd_bwd.ncu-rep.xz``: that block (bf16, batch 1, seq 512, forward and
  backward) recorded under Nsight Compute on an NVIDIA H200, found by
  :func:`recorded_report`. The tests read it too.

Importing this package imports neither torch nor pandas.
"""

from __future__ import annotations

import sys
from importlib.resources import files
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    if sys.version_info >= (3, 11):
        from importlib.resources.abc import Traversable
    else:  # Python 3.10 has it in importlib.abc only
        from importlib.abc import Traversable

__all__ = ["RECORDED_REPORT", "RECORDED_WHAT", "recorded_report"]

#: File name of the recorded report, a resource of this package.
RECORDED_REPORT = "llama_block_fwd_bwd.ncu-rep.xz"
#: What the recorded report holds, for messages.
RECORDED_WHAT = "Llama block, bf16, batch 1, seq 512, fwd+bwd, recorded on an NVIDIA H200"


def recorded_report() -> Traversable:
    """Return the recorded report as a package resource.

    Use :func:`importlib.resources.as_file` for a file-system path (it is the installed
    file itself unless the package is imported from a zip archive).

    Returns:
        The resource; ``.is_file()`` is False only in a broken install.
    """
    return files(__name__).joinpath(RECORDED_REPORT)
