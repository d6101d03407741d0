"""A cache's files: in a folder every host sees, or under an `s3://` prefix.

Layout under `<cache_dir>/<fingerprint>/`:

* `shards/<name>.arrow`: one chain call's prefix output, an Arrow IPC file (its rows' `id` and a
  binary column of `blobs` per field, read back without a copy), written whole or not at all: to
  a temporary name then renamed in a folder, one PUT on S3 (an object is whole or absent). A
  shard's name is a digest of its rows' ids, so a retried call (the same batch) writes the same
  shard again instead of a second copy;
* `ids/<name>.npy`: the shard's ids alone, written first, so sealing reads a few bytes per shard
  rather than the shard;
* `manifest.json`, then `FINAL` last (tf.data's `metadata.final`): readers trust a cache only once
  `FINAL` is there, and read only the shards the manifest names;
* `FAILED`: a write failed (a full disk); no call writes again, and the seal deletes the shards.

Shards are Arrow IPC and the id files `np.load(allow_pickle=False)`: a cache is data, never code,
wherever it came from.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from smlaunch.pipelines.cache.blobs import field_blobs

FORMAT_VERSION = 1
"""Bumped whenever a shard's layout changes: part of the fingerprint, so an old cache is not read."""


class CacheWriteFailed(Exception):
    """A shard could not be written (its partial file removed): the run goes on uncached."""


@dataclass(frozen=True)
class CacheSpec:
    """What the chain, the reader and the trainer need of a run's cache: where it lives (`root`, the
    fingerprint's folder), the prefix's length in ops, and its fingerprint."""

    root: str
    prefix: int
    fingerprint: str


class CacheStore:
    """The files of one cache (one fingerprint's folder), local or on S3."""

    def __init__(self, root: str):
        self.root = root.rstrip("/")
        self.s3 = root.startswith("s3://")

    # --- names ------------------------------------------------------------------------------

    def _key(self, rel: str) -> tuple[str, str]:
        bucket, _, prefix = self.root.removeprefix("s3://").partition("/")
        return bucket, f"{prefix.strip('/')}/{rel}".lstrip("/")

    def _path(self, rel: str) -> Path:
        return Path(self.root, rel)

    # --- bytes --------------------------------------------------------------------------------

    def put(self, rel: str, data: bytes) -> None:
        """`data` at `rel`, whole or not at all; a full disk raises `CacheWriteFailed`, nothing left."""
        if self.s3:
            bucket, key = self._key(rel)
            try:
                _client().put_object(Bucket=bucket, Key=key, Body=data)
            except Exception as exc:  # any refusal (quota, permissions): uncached, not failed
                raise CacheWriteFailed(f"{self.root}/{rel}: {exc}") from None
            return
        path = self._path(rel)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(tmp, "wb") as out:
                out.write(data)
            os.replace(tmp, path)
        except OSError as exc:
            tmp.unlink(missing_ok=True)
            raise CacheWriteFailed(f"{path}: {os.strerror(exc.errno) if exc.errno else exc}") from None

    def get(self, rel: str) -> bytes | None:
        """The bytes at `rel`, or None where there are none."""
        if self.s3:
            bucket, key = self._key(rel)
            client = _client()
            try:
                return client.get_object(Bucket=bucket, Key=key)["Body"].read()
            except client.exceptions.NoSuchKey:
                return None
        try:
            return self._path(rel).read_bytes()
        except FileNotFoundError:
            return None

    def exists(self, rel: str) -> bool:
        if self.s3:
            bucket, key = self._key(rel)
            return bool(_client().list_objects_v2(Bucket=bucket, Prefix=key, MaxKeys=1).get("KeyCount"))
        return self._path(rel).exists()

    def names(self, folder: str) -> list[str]:
        """The sorted file names directly in `folder` (temporary names left out)."""
        if self.s3:
            bucket, key = self._key(folder + "/")
            paginator = _client().get_paginator("list_objects_v2")
            found = [
                item["Key"][len(key) :]
                for page in paginator.paginate(Bucket=bucket, Prefix=key)
                for item in page.get("Contents", [])
            ]
            return sorted(n for n in found if "/" not in n)
        directory = self._path(folder)
        if not directory.is_dir():
            return []
        return sorted(e.name for e in os.scandir(directory) if e.is_file() and not e.name.startswith("."))

    def delete(self, rels: list[str]) -> None:
        if self.s3:
            bucket, _ = self._key("")
            client = _client()
            for start in range(0, len(rels), 1000):
                chunk = [{"Key": self._key(r)[1]} for r in rels[start : start + 1000]]
                client.delete_objects(Bucket=bucket, Delete={"Objects": chunk, "Quiet": True})
            return
        for rel in rels:
            self._path(rel).unlink(missing_ok=True)

    # --- shards -------------------------------------------------------------------------------

    def write_shard(self, ids: np.ndarray, fields: dict) -> str:
        """The rows `ids` with their `fields` (name -> rows) as one shard; its name."""
        import pyarrow as pa

        ids = np.asarray(ids, np.int64)
        name = shard_name(ids)
        columns = {"id": pa.array(ids, pa.int64())}
        columns.update({field: pa.array(field_blobs(v), pa.large_binary()) for field, v in fields.items()})
        table = pa.table(columns)
        ids_file, shard = io.BytesIO(), pa.BufferOutputStream()
        np.save(ids_file, ids, allow_pickle=False)
        with pa.ipc.new_file(shard, table.schema) as writer:
            writer.write_table(table)
        self.put(f"ids/{name}.npy", ids_file.getvalue())
        self.put(f"shards/{name}.arrow", shard.getvalue().to_pybytes())
        return name

    def read_shard(self, name: str):
        """A shard as an Arrow table: `id` and one binary column of blobs per field (`blobs`), over
        the shard's bytes (no copy)."""
        import pyarrow as pa

        data = self.get(f"shards/{name}.arrow")
        if data is None:
            raise FileNotFoundError(f"{self.root}/shards/{name}.arrow")
        return pa.ipc.open_file(pa.py_buffer(data)).read_all()

    def shard_ids(self, name: str) -> np.ndarray | None:
        data = self.get(f"ids/{name}.npy")
        return None if data is None else np.load(io.BytesIO(data), allow_pickle=False)

    def shards(self) -> list[str]:
        return [n.removesuffix(".arrow") for n in self.names("shards") if n.endswith(".arrow")]

    # --- state --------------------------------------------------------------------------------

    def manifest(self) -> dict | None:
        """The sealed manifest, or None: a cache without `FINAL` is not read, whatever else is there."""
        if not self.exists("FINAL"):
            return None
        data = self.get("manifest.json")
        return None if data is None else json.loads(data)

    def seal(self, manifest: dict) -> None:
        self.put("manifest.json", json.dumps(manifest).encode())
        self.put("FINAL", str(manifest.get("rows", "")).encode())

    def failed(self) -> bool:
        return self.exists("FAILED")

    def fail(self, why: str) -> None:
        """Mark the cache as failed: the reason where the disk takes it, else an empty marker (a full
        disk still takes a new empty file: no data block)."""
        try:
            self.put("FAILED", why.encode())
        except CacheWriteFailed:
            if not self.s3:
                with contextlib.suppress(OSError):
                    self._path("FAILED").touch()


def shard_name(ids: np.ndarray) -> str:
    """A shard's name from its rows' ids: the same batch always gets the same name."""
    digest = hashlib.sha256(np.ascontiguousarray(ids, np.int64).tobytes()).hexdigest()[:20]
    return f"b-{digest}-{len(ids)}"


def _client():
    from smlaunch.pipelines.s3_client import s3_client

    return s3_client(os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL"))
