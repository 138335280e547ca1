"""``python -m torch_nsight.collect.child <job-file>``: the sweep's child, as the parent starts it.

The CUDA driver starts (under ncu, about a second) in a thread while ``import torch`` runs,
then :func:`torch_nsight.collect.child.worker.main` takes over.
"""

from __future__ import annotations

import ctypes
import os
import threading


def open_the_device() -> None:
    """Initialize the CUDA driver and retain device 0's primary context (the one PyTorch
    uses). ctypes releases the GIL while the driver works. Nothing happens without one."""
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
        device, context = ctypes.c_int(), ctypes.c_void_p()
        if cuda.cuInit(0) == 0 and cuda.cuDeviceGet(ctypes.byref(device), 0) == 0:
            cuda.cuDevicePrimaryCtxRetain(ctypes.byref(context), device)
    except (OSError, AttributeError):
        pass


if __name__ == "__main__":
    if os.environ.get("CUDA_VISIBLE_DEVICES") != "":
        threading.Thread(target=open_the_device, name="torch_nsight-cuda", daemon=True).start()
    from torch_nsight.collect.child.worker import main

    raise SystemExit(main())
