"""Where a channel's objects live, a local folder or an S3 prefix, listed and read the same way.

SageMaker takes a channel from an S3 prefix; locally the same channel may come from a folder.
`ObjectSource` hides the difference from the three delivery modes: File copies every object,
Pipe streams them, FastFile reads byte ranges on demand. It is a small frozen value (a URI and
an optional endpoint), so it travels inside a FastFile view to whichever host reads it.

Keys are relative to the prefix up to its last `/`, which is where SageMaker puts an object
under `/opt/ml/input/data/<channel>`: `s3://b/train/a/x.rec` with prefix `train/` lands at
`a/x.rec`. Hidden files (a leading dot) in a folder are skipped, as a listing of real data would.
"""

from __future__ import annotations

import builtins
import functools
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from smlaunch.errors import DataError
from smlaunch.pipelines.s3_client import s3_client  # noqa: F401  # where the readers and stores take it from

CHUNK = 1 << 20


@dataclass(frozen=True)
class ChannelObject:
    key: str
    size: int
    read: Callable[[], Iterator[bytes]]
    """Yields the object's bytes in chunks."""


@dataclass(frozen=True)
class ObjectSource:
    uri: str
    """A local folder or `s3://bucket/prefix`."""
    endpoint_url: str | None = None
    """S3 endpoint (a local S3 server); None: boto3's default, which honours AWS_ENDPOINT_URL."""

    @property
    def is_s3(self) -> bool:
        return self.uri.startswith("s3://")

    def _bucket_prefix(self) -> tuple[str, str]:
        bucket, _, prefix = self.uri.removeprefix("s3://").partition("/")
        return bucket, prefix

    def list(self) -> list[tuple[str, int]]:
        """(key relative to the prefix, size) of every object, sorted by key."""
        if not self.is_s3:
            root = Path(self.uri).expanduser()
            if not root.is_dir():
                raise DataError(f"source {self.uri} is not a directory")
            return sorted(
                (str(p.relative_to(root)), p.stat().st_size)
                for p in root.rglob("*")
                if p.is_file() and not any(part.startswith(".") for part in p.relative_to(root).parts)
            )
        bucket, prefix = self._bucket_prefix()
        strip = prefix.rsplit("/", 1)[0] + "/" if "/" in prefix else ""
        found = []
        from smlaunch.console import Progress

        # A page is 1,000 keys: a prefix of 1.28M objects is 1,281 requests, so the count is shown as it grows.
        with Progress(f"listing {self.uri}", unit="object", leave=False) as bar:
            try:
                for page in (
                    s3_client(self.endpoint_url).get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
                ):
                    for item in page.get("Contents", []):
                        if not item["Key"].endswith("/"):
                            found.append((item["Key"][len(strip) :], item["Size"]))
                    bar.update(len(page.get("Contents", [])))
            except Exception as exc:  # botocore's errors: no such bucket, no credentials, endpoint down
                raise DataError(f"cannot list {self.uri}: {exc}") from None
        return sorted(found)

    def _key(self, rel: str) -> str:
        prefix = self._bucket_prefix()[1]
        return (prefix.rsplit("/", 1)[0] + "/" if "/" in prefix else "") + rel

    def read(self, rel: str) -> Iterator[bytes]:
        """The object's bytes, in chunks of about 1 MiB."""
        if not self.is_s3:
            with open(Path(self.uri).expanduser() / rel, "rb") as f:
                while chunk := f.read(CHUNK):
                    yield chunk
            return
        bucket = self._bucket_prefix()[0]
        yield from s3_client(self.endpoint_url).get_object(Bucket=bucket, Key=self._key(rel))["Body"].iter_chunks(CHUNK)

    def size(self, rel: str) -> int:
        """The object's size: a stat, or one HEAD request on S3 (missing: FileNotFoundError)."""
        if not self.is_s3:
            return os.stat(Path(self.uri).expanduser() / rel).st_size
        try:
            return s3_client(self.endpoint_url).head_object(Bucket=self._bucket_prefix()[0], Key=self._key(rel))[
                "ContentLength"
            ]
        except Exception as exc:  # botocore's ClientError (404) and endpoint errors
            raise FileNotFoundError(f"{self.uri.rstrip('/')}/{rel}: {exc}") from None

    def read_range(self, rel: str, start: int, length: int) -> bytes:
        """`length` bytes from `start` (fewer at the end): one ranged GET on S3."""
        if length <= 0:
            return b""
        if not self.is_s3:
            with open(Path(self.uri).expanduser() / rel, "rb") as f:
                f.seek(start)
                return f.read(length)
        bucket = self._bucket_prefix()[0]
        response = s3_client(self.endpoint_url).get_object(
            Bucket=bucket, Key=self._key(rel), Range=f"bytes={start}-{start + length - 1}"
        )
        return response["Body"].read()

    def objects(self) -> builtins.list[ChannelObject]:  # `list` in this class is the method above
        return [ChannelObject(rel, size, functools.partial(self.read, rel)) for rel, size in self.list()]


def local_objects(folder: str | os.PathLike) -> list[ChannelObject]:
    return ObjectSource(str(folder)).objects()


def s3_objects(uri: str, endpoint_url: str | None = None) -> list[ChannelObject]:
    """Objects under `s3://bucket/prefix`; the endpoint defaults to boto3's (honours AWS_ENDPOINT_URL)."""
    return ObjectSource(uri, endpoint_url).objects()


def objects_for_host(objects: list, distribution: str, host_index: int, host_count: int) -> list:
    """What host `host_index` of `host_count` receives: all (FullyReplicated) or every n-th (ShardedByS3Key)."""
    if distribution == "ShardedByS3Key":
        return objects[host_index::host_count]
    if distribution != "FullyReplicated":
        raise ValueError(f"S3DistributionType {distribution!r}; expected FullyReplicated or ShardedByS3Key")
    return list(objects)
