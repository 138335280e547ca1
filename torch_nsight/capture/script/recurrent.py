"""The probe of ``profile``'s automatic launch replication: cuDNN recurrent layers.

A cuDNN LSTM, GRU or RNN (``nn.RNNBase`` on the GPU) runs all its time steps from one ATen
call (``_cudnn_rnn``), which launches the same few kernels once per time step and layer:
1,400 launches a step for a 2-layer LSTM over 128 time steps. Neither identical blocks nor
repeated op calls can leave those out of ncu's replay; only ncu's own ``--kernel-id`` can,
chosen after a launch list recorded first without ncu (``profile --replicate-launches``).

ncu's filters are fixed when it starts, and only the script knows its model. So ``profile``
starts ncu as usual with :attr:`~torch_nsight.environment.ScriptEnv.probe_launches` set; the
first step the script enters with a module instrumented, before the chosen steps, looks at the
instrumented modules (:func:`recurrent_layers`), and where it finds such a layer it writes a
``recurrent`` status line and ends the process before any launch is profiled (:func:`probe`).
``profile`` then lists the launches and runs the command again. A model without one pays
nothing but a few attribute reads a step until the first one instrumented.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys

from torch_nsight.environment import ScriptEnv
from torch_nsight.status import RECURRENT_EVENT, StatusWriter

logger = logging.getLogger(__name__)

__all__ = ["PROBE_EXIT_STATUS", "probe", "recurrent_layers"]

#: The exit status of a process the probe ended (``profile`` reads the status line, not this).
PROBE_EXIT_STATUS = 3

_PROBED: list[bool] = []


def recurrent_layers() -> list[str]:
    """The qualified names of the instrumented ``nn.RNNBase`` layers whose weights are on a
    GPU with cuDNN enabled (their time steps' launches all come from one call); [] otherwise."""
    import torch
    from torch import nn

    from torch_nsight.capture.ranges.registry import instrumented_modules

    if not (torch.backends.cudnn.enabled and torch.backends.cudnn.is_available()):
        return []
    found = [name for module, name in instrumented_modules()
             if isinstance(module, nn.RNNBase)
             and any(p.is_cuda for p in module.parameters(recurse=False))]
    return sorted(found)


def probe(script: ScriptEnv, status: StatusWriter | None, index: int) -> None:
    """At a step entered with ``script.probe_launches`` set, before the chosen ones (ncu has
    profiled nothing yet), once some module is instrumented: where :func:`recurrent_layers`
    finds any, write the ``recurrent`` status line and end the process with
    :data:`PROBE_EXIT_STATUS`. Nothing ends where the line could not be written (``profile``
    would not know why), nor in a rehearsal or the launch list's run without ncu (they only
    say so)."""
    if _PROBED or not script.probe_launches or status is None:
        return
    if script.steps is not None and index >= script.steps.first:
        _PROBED.append(True)  # too late: the chosen steps are ncu's
        return
    from torch_nsight.capture.ranges.registry import instrumented_modules

    if not instrumented_modules():  # instrument() may come after the first steps
        return
    _PROBED.append(True)
    layers = recurrent_layers()
    if not layers or not status.emit(RECURRENT_EVENT, modules=layers):
        return
    if script.rehearsal or script.timeline is not None:  # no ncu: it only says so
        return
    logger.info("torch_nsight: cuDNN recurrent layers (%s): ending this run for torch-nsight "
                "profile to list its launches first", ", ".join(layers))
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):  # a replaced stream may not flush
            stream.flush()
    logging.shutdown()
    os._exit(PROBE_EXIT_STATUS)  # no atexit handler of the script's: it runs again
