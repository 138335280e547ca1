"""The protocol with the user's script: its steps (:func:`torch_nsight.step`), their
bare times for ``--verify``, the chosen steps under PyTorch's profiler."""
