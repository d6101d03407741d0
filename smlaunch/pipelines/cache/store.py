"""A cache's files: in a folder every host sees, or under an `s3://` prefix.

Layout under `<cache_dir>/<fingerprint>/`:

* `shards/<name>.arrow`: one chain call's prefix output (an epoch that writes the cache calls the
  chain on `CacheSpec.shard_rows` rows at a time, about `SHARD_BYTES`), as chunks of the pipeline's
  batch: each chunk a whole Arrow IPC stream (its rows' `id` and a binary column of `blobs` per
  field, read back without a copy) and the file their concatenation, so a cached epoch reads a
  chunk with one ranged read (`read_chunk`) and its units are chunks, not shards. Written whole or
  not at all: to a temporary name then renamed in a folder, one PUT on S3 (an object is whole or
  absent). A shard's name is a digest of its rows' ids, so a retried call (the same rows) writes
  the same shard again instead of a second copy;
* `ids/<name>.npz`: the shard's ids and its chunks' byte offsets and rows, written first, so
  sealing reads a few bytes per shard rather than the shard;
* `manifest.json`, then `FINAL` last (tf.data's `metadata.final`): readers trust a cache only once
  `FINAL` is there, and read only the chunks the manifest names;
* `FAILED`: a write failed (a full disk); no call writes again, and the seal deletes the shards.

Shards are Arrow IPC and the index files `np.load(allow_pickle=False)`: a cache is data, never code,
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

from smlaunch.pipelines.cache.blobs import field_column

FORMAT_VERSION = 2
"""Bumped whenever a shard's layout changes: part of the fingerprint, so an old cache is not read.
2: shards of chunks (1: a shard per batch)."""
SHARD_BYTES = 128 << 20
"""A shard's size, about (the cache's files, its PUTs and the seal's reads grow with their count:
1.56M shards of a 64-row batch at 100M samples, 57k of 128 MiB at 77 KB a row): what
`shard_rows` aims at where the prefix's output size is known."""


class CacheWriteFailed(Exception):
    """A shard could not be written (its partial file removed): the run goes on uncached."""


@dataclass(frozen=True)
class CacheSpec:
    """What the chain, the reader and the trainer need of a run's cache: where it lives (`root`, the
    fingerprint's folder), the prefix's length in ops, its fingerprint, and a shard's and a chunk's rows."""

    root: str
    prefix: int
    fingerprint: str
    shard_rows: int = 0
    """Rows of an epoch's chain call where it writes the cache: one shard (`shard_rows`; 0: the
    pipeline's batch)."""
    chunk_rows: int = 0
    """Rows of a shard's chunk, and of the prefix's runs within a call: the pipeline's batch (0: the
    call's rows)."""


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

    def put(self, rel: str, data) -> None:
        """`data` (bytes, or a buffer: a shard's Arrow buffer on S3) at `rel`, whole or not at all;
        a full disk raises `CacheWriteFailed`, nothing left."""
        if self.s3:
            bucket, key = self._key(rel)
            body = data if isinstance(data, bytes) else bytes(memoryview(data))
            try:
                _client().put_object(Bucket=bucket, Key=key, Body=body)
            except Exception as exc:  # any refusal (quota, permissions): uncached, not failed
                raise CacheWriteFailed(f"{self.root}/{rel}: {exc}") from None
            return
        with self._file(rel) as out:
            out.write(data)

    @contextlib.contextmanager
    def _file(self, rel: str):
        """A file of this folder to write `rel` into: a temporary name, renamed to `rel` once the block
        ends; a failed write (a full disk) removes it and raises `CacheWriteFailed`."""
        path = self._path(rel)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(tmp, "wb") as out:
                yield out
            os.replace(tmp, path)
        except OSError as exc:
            tmp.unlink(missing_ok=True)
            raise CacheWriteFailed(f"{path}: {os.strerror(exc.errno) if exc.errno else exc}") from None
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise

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

    def write_shard(self, ids: np.ndarray, fields: dict, chunk_rows: int = 0) -> str:
        """The rows `ids` with their `fields` (name -> rows) as one shard of chunks of `chunk_rows`
        rows (0: one chunk); its name."""
        import pyarrow as pa

        ids = np.asarray(ids, np.int64)
        name = shard_name(ids)
        columns = {"id": pa.array(ids, pa.int64())}
        columns.update({field: field_column(v) for field, v in fields.items()})
        table = pa.table(columns)
        step = chunk_rows or max(1, len(ids))
        offsets, rows = [0], []

        def chunks(sink) -> None:
            for start in range(0, max(1, len(ids)), step):
                chunk = table.slice(start, step)
                with pa.ipc.new_stream(sink, table.schema) as writer:
                    writer.write_table(chunk)
                offsets.append(sink.tell())
                rows.append(chunk.num_rows)

        def put_index() -> None:  # before the shard is there: a listed shard always has its index
            index = io.BytesIO()
            np.savez(index, ids=ids, offsets=np.asarray(offsets, np.int64), rows=np.asarray(rows, np.int64))
            self.put(f"ids/{name}.npz", index.getvalue())

        rel = f"shards/{name}.arrow"
        if self.s3:
            shard = pa.BufferOutputStream()
            chunks(shard)
            put_index()
            self.put(rel, shard.getvalue())
        else:  # straight into the file: a 128 MiB buffer first was one more copy of the pixels
            with self._file(rel) as out:
                chunks(out)
                put_index()
        return name

    def read_chunk(self, name: str, start: int, end: int):
        """One chunk of a shard (its bytes `start` to `end`) as an Arrow table: `id` and one binary
        column of blobs per field, over the shard's mapped bytes in a folder (no copy: reading them
        into a buffer first cost a cached read 47 us a row of 160 px against 30 mapped, 2-core VM),
        or over one ranged read's (a GET's `Range`) on S3."""
        import pyarrow as pa

        if self.s3:
            bucket, key = self._key(f"shards/{name}.arrow")
            data = _client().get_object(Bucket=bucket, Key=key, Range=f"bytes={start}-{end - 1}")["Body"].read()
        else:  # mapped, not read: the pixels stay in the page cache until the reader's one copy
            with pa.memory_map(str(self._path(f"shards/{name}.arrow"))) as shard:
                shard.seek(start)
                data = shard.read_buffer(end - start)
        if len(data) != end - start:
            raise OSError(f"{self.root}/shards/{name}.arrow: {len(data)} bytes at {start}, {end - start} expected")
        return pa.ipc.open_stream(pa.py_buffer(data)).read_all()

    def shard_index(self, name: str) -> dict | None:
        """A shard's `ids`, its chunks' byte `offsets` (one more than its chunks) and `rows`; None
        where its index file is gone."""
        data = self.get(f"ids/{name}.npz")
        if data is None:
            return None
        with np.load(io.BytesIO(data), allow_pickle=False) as index:
            return {key: index[key] for key in ("ids", "offsets", "rows")}

    def shard_files(self, names: list[str]) -> list[str]:
        """The files of the shards `names`: what deleting them removes."""
        return [f"shards/{n}.arrow" for n in names] + [f"ids/{n}.npz" for n in names]

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


def shard_rows(batch: int, epoch_rows: int | None, row_bytes: int | None, slots: int) -> int:
    """Rows of a chain call that writes one shard: about `SHARD_BYTES` of the prefix's output
    (`row_bytes` a row; unknown: a batch), no more than lets each of the chain's `slots` take two
    calls of the epoch's rows (a small channel still spreads over its hosts), a whole number of
    batches, one at least."""
    if not row_bytes:
        return batch
    by_size = SHARD_BYTES // row_bytes
    spread = epoch_rows // (2 * max(1, slots)) if epoch_rows else by_size
    return max(1, min(by_size, spread) // batch) * batch
