"""Shared fixtures: a real S3-protocol server on 127.0.0.1 (moto in server mode), one per test
session (the 3-node Ray cluster `data_cluster` is in tests/conftest.py)."""


import pytest

from smlaunch.pipelines.sources.local_s3 import LocalS3


@pytest.fixture(scope="session")
def s3_endpoint():
    with LocalS3() as server:
        yield server.endpoint_url


@pytest.fixture
def s3(s3_endpoint, monkeypatch):
    """A boto3 S3 client of the local server, with throwaway credentials."""
    import boto3

    for key, value in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                       "AWS_DEFAULT_REGION": "us-east-1", "AWS_ENDPOINT_URL": s3_endpoint}.items():
        monkeypatch.setenv(key, value)
    return boto3.client("s3", endpoint_url=s3_endpoint)
