"""What the sweep's parent and child agree on (see :mod:`torch_nsight.collect`)."""
