"""NVTX ranges on modules, their backward, named ops, optimizer steps and the loop's calls
outside the model: the emitter, the per-thread range stack, the forward wrappers and hooks,
which modules get ranges, and whether a profiler listens. The base of the capture rooms."""
