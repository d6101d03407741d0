"""A run directory on S3 (`run.dir: s3://bucket/prefix`, on a running Ray cluster or KubeRay).

A cluster that smlaunch attached to may be deleted when the job ends (a RayJob) and its nodes
share no disk, so the outputs can go to S3 instead of a shared path:

* checkpoints: Ray Train writes them itself (`storage_path` + `storage_filesystem`, pyarrow's S3
  client, which each worker rebuilds from the node's own credentials; none travel with the job);
* the model: rank 0 writes it to a temporary directory and uploads it (`upload_dir`);
* logs, the resolved config, TensorBoard events and the report: the driver writes them to a
  local staging directory and uploads it when the run ends, failed or not;
* resume: `latest_complete` lists the checkpoints on S3 and picks the newest whose `state.pt`
  has the size its `meta.json` vouches for; rank 0 downloads it and checks its SHA-256
  (`fetch_checkpoint`) before loading. An S3 object is whole or absent, so a checkpoint cut
  short misses files rather than holding half of one.

The endpoint is boto3's, or `AWS_ENDPOINT_URL_S3` (`run.s3_endpoint` sets it for the whole Ray
job), so the driver, rank 0 and Ray Train all talk to the same S3.
"""

from __future__ import annotations

import contextlib
import logging
import os
from pathlib import Path

from smlaunch.errors import UserError

log = logging.getLogger("smlaunch")


def is_s3(uri: str | None) -> bool:
    return bool(uri) and str(uri).startswith("s3://")


def join(root: str, *parts: str) -> str:
    """`root/part/...` for a path or an `s3://` URI (Path would fold `s3://` into `s3:/`)."""
    if is_s3(root):
        return "/".join([root.rstrip("/"), *parts])
    return str(Path(root, *parts))


def split(uri: str) -> tuple[str, str]:
    """(bucket, key prefix without a trailing slash)."""
    bucket, _, key = uri.removeprefix("s3://").partition("/")
    return bucket, key.strip("/")


def endpoint() -> str | None:
    return os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")


def _client():
    from smlaunch.pipelines.sources.objects import s3_client

    return s3_client(endpoint())  # one client per endpoint argument: pass it, not None


def ray_storage(uri: str) -> tuple[str, object | None]:
    """(storage_path, storage_filesystem) for Ray Train's RunConfig: a path as it is, or an S3
    URI as `bucket/key` on a pyarrow S3 filesystem for the endpoint. No credentials are put in it:
    every node that unpickles it resolves its own (environment, profile, instance or pod role)."""
    if not is_s3(uri):
        return uri, None
    from urllib.parse import urlparse

    from pyarrow import fs

    bucket, key = split(uri)
    options = {}
    url = endpoint()
    if url:
        parsed = urlparse(url)
        options = {"endpoint_override": parsed.netloc, "scheme": parsed.scheme or "https"}
    region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
    if region is None and not url:
        region = fs.resolve_s3_region(bucket)
    return f"{bucket}/{key}".rstrip("/"), fs.S3FileSystem(region=region or "us-east-1", connect_timeout=10, **options)


def check_writable(uri: str, what: str = "run.dir") -> None:
    """Put and delete a marker under `uri`: a missing bucket or a denied write fails here, in one
    line, before any work, not at the first checkpoint."""
    from botocore.exceptions import BotoCoreError, ClientError

    bucket, key = split(uri)
    if not bucket:
        raise UserError(f"{what}: {uri} names no bucket (expected s3://bucket/prefix)")
    marker = f"{key}/.smlaunch-write-check".lstrip("/")
    try:
        _client().put_object(Bucket=bucket, Key=marker, Body=b"")
        _client().delete_object(Bucket=bucket, Key=marker)
    except ClientError as exc:
        code = exc.response.get("Error", {}).get("Code", "") or str(exc)
        raise UserError(
            f"{what}: cannot write to {uri} ({code}); create the bucket or grant s3:PutObject and s3:DeleteObject on it"
        ) from None
    except BotoCoreError as exc:
        raise UserError(f"{what}: cannot reach S3 for {uri} ({exc})") from None


def upload_dir(local: str | os.PathLike, uri: str) -> int:
    """Every file under `local` to the same relative key under `uri`; the count uploaded."""
    bucket, key = split(uri)
    count = 0
    for path in sorted(Path(local).rglob("*")):
        if path.is_file():
            rel = path.relative_to(local).as_posix()
            with _one_line(f"uploading {rel} to {uri}"):
                _client().upload_file(str(path), bucket, f"{key}/{rel}".lstrip("/"))
            count += 1
    return count


def download_dir(uri: str, local: str | os.PathLike) -> int:
    """Every object under `uri/` into `local` by its relative key; the count downloaded. A key is a
    name, not a path: one that would land outside `local` (`../`, an absolute part) is refused in one
    line before anything of it is written, whoever put it in the bucket."""
    bucket, key = split(uri)
    count = 0
    inside = Path(local).resolve()
    for item in list_objects(bucket, f"{key}/"):
        if item["Key"].endswith("/"):  # a folder marker (pyarrow writes them), not a file
            continue
        target = Path(local, item["Key"][len(key) + 1 :])
        if not target.resolve().is_relative_to(inside):
            raise UserError(
                f"s3://{bucket}/{item['Key']}: its key leads outside {uri}/ (a `..` or absolute part); "
                "not downloading it: delete that object"
            )
        target.parent.mkdir(parents=True, exist_ok=True)
        with _one_line(f"downloading s3://{bucket}/{item['Key']}"):
            _client().download_file(bucket, item["Key"], str(target))
        count += 1
    return count


def read_json(uri: str):
    """The JSON object at `uri`."""
    import json

    bucket, key = split(uri)
    with _one_line(f"reading {uri}"):
        return json.loads(_client().get_object(Bucket=bucket, Key=key)["Body"].read())


@contextlib.contextmanager
def _one_line(doing: str):
    """An S3 failure as one UserError line (a rank's UserError ends the job at once, where any
    other error would have Ray Train restart the group and fail the same way again)."""
    from boto3.exceptions import Boto3Error
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        yield
    except ClientError as exc:
        raise UserError(f"run.dir: {doing} failed ({exc.response.get('Error', {}).get('Code', '') or exc})") from None
    except (BotoCoreError, Boto3Error) as exc:
        raise UserError(f"run.dir: {doing} failed ({exc})") from None


def list_objects(bucket: str, prefix: str):
    """Every object under `prefix` of `bucket` (boto3's `list_objects_v2` entries), page by page."""
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        for page in _client().get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
            yield from page.get("Contents", [])
    except (ClientError, BotoCoreError) as exc:
        raise UserError(f"cannot list s3://{bucket}/{prefix} ({exc})") from None
