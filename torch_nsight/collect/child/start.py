"""The sweep child's entry point: CUDA starts while Python imports torch and the job's code.

    python -m torch_nsight.collect.child.start <job-file>

A child is a fresh process (``ncu`` starts it), so before it can run anything it imports
torch, unpickles the job (which imports the model's library: ``transformers`` alone takes
seconds) and starts CUDA. The first two hold the interpreter; the third is the driver's own
work. Here a thread asks the driver for the GPU's primary context through ``ctypes`` (which
lets go of the interpreter during the call) while the main thread imports, so that when torch
first touches the GPU the context is already there: torch's runtime uses the same primary
context. Nothing of this is required: without ``libcuda`` (a dry run on the CPU), or when
the driver refuses, the thread ends quietly and torch starts CUDA itself, as before.
``TORCH_NSIGHT_EARLY_CUDA=0`` turns it off.

Imports only the standard library until the worker is imported, so the thread starts before
torch does.
"""

from __future__ import annotations

import ctypes
import os
import threading
import time

from torch_nsight.environment import EARLY_CUDA_ENV  # the standard library alone (and switches)

#: When the early start ended and how (``ok`` or the step that failed): the worker copies
#: it into its timing.
OUTCOME: dict[str, object] = {}


def start_cuda() -> None:
    """Initialise the driver and retain device 0's primary context (the one torch uses in a
    child that sees one GPU). Never raises: on any failure torch starts CUDA itself later."""
    started = time.time()
    try:
        driver = ctypes.CDLL("libcuda.so.1")
        device, context = ctypes.c_int(), ctypes.c_void_p()
        steps = (("cuInit", lambda: driver.cuInit(0)),
                 ("cuDeviceGet", lambda: driver.cuDeviceGet(ctypes.byref(device), 0)),
                 ("cuDevicePrimaryCtxRetain",
                  lambda: driver.cuDevicePrimaryCtxRetain(ctypes.byref(context), device)))
        for name, call in steps:
            code = call()
            if code != 0:
                OUTCOME.update(outcome=f"{name} returned {code}")
                return
        OUTCOME.update(outcome="ok")
    except (OSError, AttributeError) as err:  # no driver here, or a driver without the call
        OUTCOME.update(outcome=f"{type(err).__name__}: {err}")
    finally:
        OUTCOME.update(started=started, ended=time.time())


def start_cuda_early() -> threading.Thread | None:
    """Start :func:`start_cuda` on a daemon thread unless ``TORCH_NSIGHT_EARLY_CUDA=0``."""
    if os.environ.get(EARLY_CUDA_ENV, "1").strip() == "0":
        return None
    thread = threading.Thread(target=start_cuda, name="torch_nsight-cuda-start", daemon=True)
    thread.start()
    return thread


def main() -> None:
    """Start CUDA on a thread, then run the worker (which never returns)."""
    start_cuda_early()
    from torch_nsight.collect.child import worker

    worker.exit_now(worker.main(early_cuda=OUTCOME))


if __name__ == "__main__":
    main()
