"""A batch's fields as bytes and back, without pickle: how a cache shard holds them.

Each row of a field becomes one blob, a small header (dtype, shape) and the row's bytes, so images
of different sizes (a `resize` keeps the aspect ratio) and a map op's fixed-size arrays travel the
same way: in a shard and in the Arrow blocks a cached read yields (one binary column per field).
Loading one needs NumPy only: no object is ever unpickled from a cache.
"""

from __future__ import annotations

import struct
from typing import Any

import numpy as np

BYTES = b"|b"
"""The dtype tag of a field whose rows are raw bytes (an encoded image left undecoded)."""


def row_blob(value) -> bytes:
    """One row's value as a blob: `len(dtype) dtype ndim dims... bytes`, little-endian."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return struct.pack("<B", len(BYTES)) + BYTES + struct.pack("<B", 0) + bytes(value)
    array = np.asarray(value)
    array = array if array.flags.c_contiguous else np.ascontiguousarray(array)  # (a 0-d one stays 0-d)
    if array.dtype.hasobject:
        raise TypeError(f"a field of {array.dtype} rows cannot be cached")
    return _header(array.dtype, array.shape) + array.tobytes()


def _header(dtype: np.dtype, shape: tuple) -> bytes:
    tag = dtype.str.encode()
    return struct.pack(f"<B{len(tag)}sB{len(shape)}q", len(tag), tag, len(shape), *shape)


def from_blob(blob) -> Any:
    """A row's value back from `row_blob` (an array over the blob's bytes, read-only; or bytes)."""
    view = memoryview(blob)
    size = view[0]
    dtype = bytes(view[1 : 1 + size])
    ndim = view[1 + size]
    start = 2 + size + 8 * ndim
    if dtype == BYTES:
        return bytes(view[start:])
    shape = struct.unpack(f"<{ndim}q", view[2 + size : start])
    return np.frombuffer(view[start:], dtype=np.dtype(dtype.decode())).reshape(shape)


def field_blobs(values) -> list[bytes]:
    """A field's rows as blobs (a list of arrays, an array of rows, or an array of bytes objects)."""
    return [row_blob(v) for v in values]


def field_column(values):
    """A field's rows as an Arrow `large_binary` array of their blobs (`row_blob`'s bytes, row by
    row). Rows of one dtype and shape (images of one size, labels) are laid out in one buffer, a
    single copy of the pixels, where a `bytes` blob a row and then Arrow's copy of them made two
    (with the file written straight from the IPC stream, a shard of 1,280 images of 160 px went
    from 143 to 56 us a row: bench/cache.py's `write_copies`, BENCHMARKS.md). Anything else
    (bytes, images of their own sizes) goes blob by blob."""
    import pyarrow as pa

    rows = _uniform_arrays(values)
    if rows is None:
        return pa.array(field_blobs(values), pa.large_binary())
    count, (dtype, shape) = len(rows), (rows[0].dtype, rows[0].shape)
    header = np.frombuffer(_header(dtype, shape), np.uint8)
    width = len(header) + dtype.itemsize * int(np.prod(shape))
    out = np.empty((count, width), np.uint8)
    out[:, : len(header)] = header
    body = out[:, len(header) :]
    if isinstance(rows, np.ndarray):
        body[:] = np.ascontiguousarray(rows).reshape(count, -1).view(np.uint8)
    else:
        for i, row in enumerate(rows):
            body[i] = np.ascontiguousarray(row).reshape(-1).view(np.uint8)
    offsets = np.arange(count + 1, dtype=np.int64) * width
    return pa.Array.from_buffers(pa.large_binary(), count, [None, pa.py_buffer(offsets), pa.py_buffer(out)])


def _uniform_arrays(values):
    """`values` as rows of one numeric dtype and shape (an array of rows, or a list of arrays), or
    None (bytes, objects, rows that differ, no rows)."""
    if isinstance(values, np.ndarray) and not values.dtype.hasobject:
        return values if len(values) else None
    if not len(values) or not all(isinstance(v, np.ndarray) for v in values):
        return None
    first = values[0]
    if first.dtype.hasobject or any(v.dtype != first.dtype or v.shape != first.shape for v in values):
        return None
    return values


def field_from_blobs(blobs) -> Any:
    """A field back from its rows' blobs: one array when every row has the same shape and dtype
    (labels, a map op's fixed-size outputs, images of one size), else a list of arrays (images of
    their own sizes), or an array of bytes objects."""
    rows = [from_blob(b) for b in blobs]
    if rows and isinstance(rows[0], bytes):
        out = np.empty(len(rows), dtype=object)
        out[:] = rows
        return out
    if rows and all(r.shape == rows[0].shape and r.dtype == rows[0].dtype for r in rows):
        return np.stack(rows)
    return rows


def uniform_view(column) -> np.ndarray | None:
    """A binary column of blobs (an Arrow `large_binary` array) as one array of its rows, over the
    column's own bytes (no copy: read-only, possibly unaligned), where every row has the same dtype
    and shape (labels, images of one size); None where the rows differ, or are bytes."""
    if len(column) == 0 or column.null_count:
        return None
    _, offsets, data = column.buffers()
    ends = np.frombuffer(offsets, np.int64, len(column) + 1, column.offset * 8)
    lengths = np.diff(ends)
    if (lengths != lengths[0]).any():
        return None
    raw = np.frombuffer(data, np.uint8)[ends[0] : ends[-1]].reshape(len(column), int(lengths[0]))
    first = memoryview(raw[0])
    size = first[0]
    if bytes(first[1 : 1 + size]) == BYTES:
        return None
    header = 2 + size + 8 * first[1 + size]
    if (raw[:, :header] != raw[0, :header]).any():  # another dtype or shape of the same length
        return None
    sample = from_blob(raw[0])
    return raw[:, header:].view(sample.dtype).reshape(len(column), *sample.shape)
