"""The calls table (per module call and aten op, the shapes, FLOPs and costs), what is
carried into the report inside range messages, and the user's global PyTorch settings."""
