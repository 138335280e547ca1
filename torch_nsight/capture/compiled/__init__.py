"""Compiled code keeps its modules: the kernels of ``torch.compile`` graphs attributed to
the modules they came from (Inductor's hooks, the kernel maps, their ranges)."""
