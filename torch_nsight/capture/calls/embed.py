"""Shapes inside the report: the calls table carried by one NVTX range message.

Under Nsight Compute, :func:`torch_nsight.instrument` records the calls table by itself (no
argument needed) and puts it into the report: it opens a start/end range of the domain
:data:`~torch_nsight.naming.DOMAIN` whose message is the table, compressed
(:func:`torch_nsight.formats.encode_calls`), launches one small fill kernel inside it and
closes it. ncu stores the ranges open around each profiled kernel with the kernel, so the
report keeps the table (messages of 4 MB were kept whole on ncu 2025.3.1), and
:func:`torch_nsight.load` reads it back and drops the carrier kernel. Nothing is written
beside the report.

When the table is recorded:

* with a step selection (``torch-nsight profile --steps A:B`` sets
  :attr:`~torch_nsight.environment.ScriptEnv.steps`): over the first chosen step, forward,
  backward and optimizer, and carried at that step's end, inside the range ncu profiles; under
  ``profile --replicate-launches`` (:attr:`~torch_nsight.environment.ScriptEnv.carry_last`)
  at the last chosen step's end instead, so that the carrier's own launch comes after every
  launch ncu numbers from the launch list;
* otherwise: over the model's first iteration (its first forward and the backward after it),
  and carried when the next iteration starts, when the instrumentation is removed, or at
  exit.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any

from torch_nsight.formats import encode_calls
from torch_nsight.naming import DOMAIN

logger = logging.getLogger(__name__)

__all__ = ["CallsCarrier", "carry_calls", "carry_message"]


def carry_message(message: str, what: str) -> bool:
    """Launch one small fill kernel inside a start/end range named ``message`` (domain
    :data:`~torch_nsight.naming.DOMAIN`), so that ncu keeps the message with the kernel.

    Args:
        message: the packed document (:func:`torch_nsight.formats.pack_message`).
        what: what it carries, for the log (``"the calls table"``).

    Returns:
        Whether it was launched (not without an initialized CUDA device, nor while a CUDA
        graph is captured; always, launching nothing, in a rehearsal).
    """
    from torch_nsight.capture.ranges.detect import rehearsing

    if rehearsing():  # profile --dry-run: no report to carry it into
        logger.debug("torch_nsight: a rehearsal: %s would be carried (%d bytes)", what,
                     len(message))
        return True
    import torch

    if not (torch.cuda.is_available() and torch.cuda.is_initialized()):
        logger.warning("torch_nsight: no CUDA work yet, so %s is not carried into the report",
                       what)
        return False
    if torch.cuda.is_current_stream_capturing():  # a CUDA graph would swallow the kernel
        logger.warning("torch_nsight: a CUDA graph is being captured: %s is not carried "
                       "into the report", what)
        return False
    import nvtx

    handle = nvtx.start_range(message, domain=DOMAIN)
    try:
        torch.zeros(1, device=torch.device("cuda", torch.cuda.current_device()))
    finally:
        nvtx.end_range(handle)
    logger.info("torch_nsight: carried %s (%d bytes) into the report", what, len(message))
    return True


def carry_calls(document: dict[str, Any]) -> bool:
    """Carry the calls table ``document`` into the report (see the module docstring;
    without it the fast metric set has no FLOPs).

    Returns:
        Whether it was launched.
    """
    return carry_message(encode_calls(document),
                         f"the calls table ({len(document.get('rows') or ())} rows)")


class CallsCarrier:
    """Records one calls table with ``recorder`` and carries it into the report once.

    Args:
        recorder: the :class:`~torch_nsight.capture.calls.recorder.CallRecorder` the model's ranges
            go through (``first_iteration`` unless ``per_step``).
        per_step: record the first measured step (:meth:`step_started`, :meth:`step_ended`)
            instead of the first iteration.
        at_last: carry it at the last measured step's end rather than the first's: ncu
            numbers the launches from a launch list (``profile --replicate-launches``), where
            the carrier's own launch must come after all of them.
    """

    def __init__(self, recorder: Any, *, per_step: bool, at_last: bool = False) -> None:
        self.recorder = recorder
        self.per_step = per_step
        self.at_last = at_last
        self._window: contextlib.AbstractContextManager[Any] | None = None
        self._recorded = False
        self._carried = False
        self.rows = 0  # calls carried (0 until then)

    def step_started(self) -> None:
        """A measured step starts: record it, if it is the first (never raises)."""
        if not self.per_step or self._carried or self._recorded or self._window is not None:
            return
        try:
            window = self.recorder.recording()
            window.__enter__()
            self._window = window
        except Exception as err:  # noqa: BLE001 - never into the user's step
            logger.warning("torch_nsight: could not record the calls table: %s", err)
            self._carried = True

    def step_ended(self, *, failed: bool = False, last: bool = True) -> None:
        """A measured step ends: stop recording and carry the table, or with
        :attr:`at_last` hold it until the ``last`` measured step ends (never raises). A step
        that ``failed`` (raised) while recording is forgotten and the next measured step
        recorded instead; with :attr:`at_last`, a table recorded earlier is still carried when
        the last step ends, raising or not (inside the measured range either way)."""
        if self._window is not None:
            window, self._window = self._window, None
            with contextlib.suppress(Exception):
                window.__exit__(None, None, None)
            if failed:
                self.recorder.clear()
                return
            self._recorded = True
        if self._recorded and (last or not self.at_last):
            self.carry()

    def carry(self) -> None:
        """Carry the table recorded so far, once (never raises)."""
        if self._carried:
            return
        self._carried = True
        try:
            document = self.recorder.document()
            if document["rows"] and carry_calls(document):
                self.rows = len(document["rows"])
            replicas = getattr(self.recorder, "op_replicas", None)
            if replicas is not None and replicas.calls:  # a list even of none: none lost
                from torch_nsight.formats import OP_REPLICAS_PREFIX, pack_message

                carried = replicas.document()
                carry_message(pack_message(OP_REPLICAS_PREFIX, carried),
                              f"the repeated op calls ({len(carried['replicas'])} of "
                              f"{carried['calls']})")
        except Exception as err:  # noqa: BLE001 - never into the user's program
            logger.warning("torch_nsight: could not carry the calls table into the report: "
                           "%s: %s", type(err).__name__, err)
