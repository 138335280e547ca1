"""The sweep's parent process: the user's own (see :mod:`torch_nsight.collect`)."""
