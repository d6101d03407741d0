"""One boto3 S3 client per endpoint and process, for the readers and the cache alike."""

from __future__ import annotations

import functools
import os


@functools.lru_cache(maxsize=8)
def s3_client(endpoint_url: str | None = None):
    """One boto3 S3 client per endpoint and process (clients are thread-safe; creating one costs ~50 ms)."""
    import boto3

    return boto3.session.Session().client(
        "s3", endpoint_url=endpoint_url or os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    )
