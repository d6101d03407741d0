"""A minimal `tf.train.Example` codec, so TFRecord shards interoperate without TensorFlow.

Example { Features features = 1 }  Features { map<string, Feature> feature = 1 }
Feature { oneof { BytesList bytes_list = 1; FloatList float_list = 2; Int64List int64_list = 3 } }
(tensorflow/core/example/{example,feature}.proto). Only what the wire format needs is written:
varints, length-delimited fields, packed repeated values. Decoding accepts packed and unpacked
repeated values, as protobuf parsers must.
"""

from __future__ import annotations

import struct
from typing import Union

from smlaunch.errors import DataError

Value = Union[list[bytes], list[float], list[int]]


def encode_example(features: dict[str, Union[bytes, int, float, Value]]) -> bytes:
    entries = b""
    for key, value in features.items():
        values = value if isinstance(value, list) else [value]
        entries += _field(1, _field(1, key.encode()) + _field(2, _feature(values)))
    return _field(1, entries)


def decode_example(data: bytes) -> dict[str, Value]:
    """Parse an Example into {name: list of values}; `DataError` on malformed bytes."""
    try:
        out: dict[str, Value] = {}
        for number, features in _fields(data):
            if number != 1:
                continue
            for entry_number, entry in _fields(features):
                if entry_number != 1:
                    continue
                key, feature = b"", b""
                for n, payload in _fields(entry):
                    key = payload if n == 1 else key
                    feature = payload if n == 2 else feature
                if not isinstance(key, bytes):
                    raise ValueError("a feature name is not a string")
                out[key.decode()] = _decode_feature(feature)
        return out
    except (IndexError, ValueError, struct.error, UnicodeDecodeError) as exc:
        raise DataError(f"not a tf.train.Example ({exc})") from None


def _feature(values: list) -> bytes:
    if all(isinstance(v, (bytes, bytearray)) for v in values):
        return _field(1, b"".join(_field(1, bytes(v)) for v in values))
    if all(isinstance(v, int) for v in values):
        return _field(3, _field(1, b"".join(_varint(v & 0xFFFFFFFFFFFFFFFF) for v in values)))
    return _field(2, _field(1, struct.pack(f"<{len(values)}f", *values)))


def _decode_feature(feature: bytes) -> Value:
    for kind, payload in _fields(feature):
        if kind == 1:
            return [bytes(v) for n, v in _fields(payload) if n == 1]
        if kind == 2:
            floats: list[float] = []
            for _, v in _fields(payload):
                floats.extend(struct.unpack(f"<{len(v) // 4}f", v) if isinstance(v, bytes) else [v])
            return floats
        if kind == 3:
            ints: list[int] = []
            for _, v in _fields(payload):
                raw = _varints(v) if isinstance(v, bytes) else [v]
                ints.extend(x - (1 << 64) if x >= 1 << 63 else x for x in raw)
            return ints
    return []


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _read_varint(data: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise ValueError("varint too long")


def _varints(data: bytes) -> list[int]:
    out, pos = [], 0
    while pos < len(data):
        value, pos = _read_varint(data, pos)
        out.append(value)
    return out


def _field(number: int, payload: bytes) -> bytes:
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _fields(data: bytes):
    """Yield (field number, payload) with bytes for length-delimited and ints/floats otherwise."""
    if not isinstance(data, bytes):  # a scalar where the schema has a message
        raise ValueError(f"expected a message, found the scalar {data!r}")
    pos = 0
    while pos < len(data):
        key, pos = _read_varint(data, pos)
        number, wire = key >> 3, key & 7
        if wire == 2:
            length, pos = _read_varint(data, pos)
            if pos + length > len(data):
                raise ValueError("field runs past the end")
            yield number, data[pos:pos + length]
            pos += length
        elif wire == 0:
            value, pos = _read_varint(data, pos)
            yield number, value
        elif wire == 5:
            yield number, struct.unpack_from("<f", data, pos)[0]
            pos += 4
        elif wire == 1:
            yield number, struct.unpack_from("<d", data, pos)[0]
            pos += 8
        else:
            raise ValueError(f"unsupported wire type {wire}")
