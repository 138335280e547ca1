"""The one record that passes between stages: a profile's kernel table plus metadata.

A :class:`Profile` is built by :func:`load` (from ``.ncu-rep`` reports) or by
:func:`torch_nsight.sweep`; renderers and the CLI receive it and nothing else. It saves to
and loads from Parquet (the table) plus JSON (the metadata).
"""
