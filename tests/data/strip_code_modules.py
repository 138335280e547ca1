"""Drop the code modules (cubins) an Nsight Compute report embeds, keeping everything else.

A report keeps a copy of every code module its profiled kernels came from: NCCL's alone is
105 MB, so a two-rank DDP report is 166 MB raw and 5.7 MB compressed. torch_nsight reads
kernel names, metrics, NVTX ranges and rule results, never the modules' SASS, so fixtures
drop them: the modules' entries stay, with an empty binary.

The file is ``NVR\\0``, a length-prefixed file header, then blocks: a length-prefixed block
header (field 1: source count, field 2: result count, field 5: payload size) and a payload of
length-prefixed messages; a source message's field 4 is the module's binary.

    python tests/data/strip_code_modules.py REPORT.ncu-rep OUT.ncu-rep

checks that torch_nsight reads the same kernel table from both before it keeps OUT.
"""

from __future__ import annotations

import struct
import sys
from pathlib import Path

MAGIC = b"NVR\0"


def _varint(data: bytes, i: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[i]
        i += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            return value, i


def _fields(data: bytes) -> list[tuple[int, int, object]]:
    """(field, wire type, value) of one protobuf message, in order (no schema needed)."""
    out, i = [], 0
    while i < len(data):
        key, i = _varint(data, i)
        field, wire = key >> 3, key & 7
        if wire == 0:
            value, i = _varint(data, i)
        elif wire == 2:
            size, i = _varint(data, i)
            value, i = data[i:i + size], i + size
        elif wire in (1, 5):
            width = 8 if wire == 1 else 4
            value, i = data[i:i + width], i + width
        else:
            raise ValueError(f"unsupported protobuf wire type {wire}")
        out.append((field, wire, value))
    return out


def _encode_varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _encode(fields: list[tuple[int, int, object]]) -> bytes:
    out = bytearray()
    for field, wire, value in fields:
        out += _encode_varint(field << 3 | wire)
        if wire == 0:
            out += _encode_varint(value)  # type: ignore[arg-type]
        elif wire == 2:
            out += _encode_varint(len(value)) + value  # type: ignore[arg-type, operator]
        else:
            out += value  # type: ignore[operator]
    return bytes(out)


def _sized(data: bytes, i: int) -> tuple[bytes, int]:
    size = struct.unpack_from("<I", data, i)[0]
    return data[i + 4:i + 4 + size], i + 4 + size


def strip(data: bytes) -> bytes:
    """The report ``data`` with every embedded code module emptied."""
    if not data.startswith(MAGIC):
        raise ValueError("not an Nsight Compute report (no NVR header)")
    header, i = _sized(data, len(MAGIC))
    out = bytearray(MAGIC + struct.pack("<I", len(header)) + header)
    while i < len(data):
        block, i = _sized(data, i)
        fields = _fields(block)
        values = {field: value for field, _, value in fields}
        end = i + int(values.get(5, 0))  # type: ignore[call-overload]
        payload = bytearray()
        while i < end:
            message, i = _sized(data, i)
            if values.get(1):  # a source block: its messages are code modules
                message = _encode([(f, w, b"" if (f, w) == (4, 2) else v)
                                   for f, w, v in _fields(message)])
            payload += struct.pack("<I", len(message)) + message
        block = _encode([(f, w, len(payload) if f == 5 else v) for f, w, v in fields])
        out += struct.pack("<I", len(block)) + block + payload
    return bytes(out)


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        sys.stderr.write(__doc__ or "")
        return 2
    source, target = Path(argv[0]), Path(argv[1])
    target.write_bytes(strip(source.read_bytes()))
    import pandas as pd

    import torch_nsight

    before = torch_nsight.load(source, cache=False).kernels.drop(columns=["source", "rank"], errors="ignore")
    after = torch_nsight.load(target, cache=False).kernels.drop(columns=["source", "rank"], errors="ignore")
    try:
        pd.testing.assert_frame_equal(before, after)
    except AssertionError as err:
        target.unlink()
        sys.stderr.write(f"the stripped report reads differently, not kept: {err}\n")
        return 1
    print(f"{target}: {source.stat().st_size} -> {target.stat().st_size} bytes, same table")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
