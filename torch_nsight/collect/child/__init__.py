"""The sweep's child process, run under ``ncu`` (see :mod:`torch_nsight.collect`)."""
