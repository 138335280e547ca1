"""The front door: :func:`torch_nsight.instrument` and its handle, which put every other
room to work."""
