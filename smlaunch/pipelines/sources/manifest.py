"""Augmented manifests: JSON Lines in, one RecordIO record per attribute on the stream, rows out.

SageMaker streams an AugmentedManifestFile channel in Pipe mode as one record per attribute named
in `AttributeNames`, in that order, line after line; an attribute ending in `-ref` holds an S3 URI
and arrives as that object's bytes (../shared/notes/sagemaker.md §4, §5.2). Users of the TF
extension regroup with `batch(n)`; that is where their "parse error" reports come from when a
line lacks an attribute. Here `manifest_objects` plays the platform (a line is one unit, so
sharding and shuffling keep a line's records together) and `pipelines.rows.group_attributes` regroups on the
reading side, failing with the record's position when the stream ends inside a group.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable, Iterator
from pathlib import Path

from smlaunch.errors import DataError
from smlaunch.pipelines.formats.recordio import encode_record
from smlaunch.pipelines.sources.objects import ChannelObject, ObjectSource, s3_client


def _read_manifest(source: ObjectSource) -> list[str]:
    if source.is_s3:
        bucket, _, key = source.uri.removeprefix("s3://").partition("/")
        try:
            body = s3_client(source.endpoint_url).get_object(Bucket=bucket, Key=key)["Body"].read()
        except Exception as exc:  # botocore's errors
            raise DataError(f"manifest {source.uri}: {exc}") from None
    else:
        path = Path(source.uri).expanduser()
        if not path.is_file():
            raise DataError(f"manifest {source.uri} is not a file")
        body = path.read_bytes()
    try:
        return body.decode("utf-8").splitlines()
    except UnicodeDecodeError as exc:
        raise DataError(f"manifest {source.uri}: not UTF-8 at byte {exc.start}") from None


def _value_bytes(source: ObjectSource, name: str, value, where: str) -> bytes:
    if not name.endswith("-ref"):
        return value.encode() if isinstance(value, str) else json.dumps(value).encode()
    if not isinstance(value, str):
        raise DataError(f"{where}: attribute '{name}' must be a URI, got {value!r}")
    if value.startswith("s3://"):
        bucket, _, key = value.removeprefix("s3://").partition("/")
        try:
            return s3_client(source.endpoint_url).get_object(Bucket=bucket, Key=key)["Body"].read()
        except Exception as exc:  # botocore's errors
            raise DataError(f"{where}: attribute '{name}': cannot read {value}: {exc}") from None
    path = Path(value) if Path(value).is_absolute() else Path(source.uri).expanduser().parent / value
    try:
        return path.read_bytes()
    except OSError as exc:
        raise DataError(f"{where}: attribute '{name}': {exc.strerror}: {path}") from None


def _line_records(source: ObjectSource, names: tuple[str, ...], entry: dict, where: str) -> Iterator[bytes]:
    yield b"".join(encode_record(_value_bytes(source, name, entry[name], where)) for name in names)


def manifest_objects(source: ObjectSource, names: Iterable[str]) -> list[ChannelObject]:
    """One unit per manifest line, yielding that line's attributes as consecutive RecordIO records.
    Lines are parsed (and checked for every attribute) up front; `-ref` objects are read when streamed."""
    names = tuple(names)
    objects = []
    for number, line in enumerate(_read_manifest(source), start=1):
        if not line.strip():
            continue
        where = f"manifest {source.uri} line {number}"
        try:
            entry = json.loads(line)
        except json.JSONDecodeError as exc:
            raise DataError(f"{where}: not JSON ({exc.msg} at column {exc.colno})") from None
        missing = [n for n in names if not isinstance(entry, dict) or n not in entry]
        if missing:
            raise DataError(f"{where}: no attribute {', '.join(missing)} (AttributeNames: {', '.join(names)})")
        objects.append(
            ChannelObject(f"line-{number}", len(line), functools.partial(_line_records, source, names, entry, where))
        )
    if not objects:
        raise DataError(f"manifest {source.uri} has no lines")
    return objects
