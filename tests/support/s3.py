"""The local S3 server the tests talk to, and the environment that points a client at it.

The server is the product's own (`smlaunch.pipelines.sources.local_s3.LocalS3`: moto on
127.0.0.1). Its fixtures are registered for every folder by tests/conftest.py
(`pytest_plugins`): `s3_endpoint`, one server for the session, and `s3`, a boto3 client of it
with throwaway credentials in the environment; `moto_server`, one per module with moto's request
recorder on, for the tests that read what went over the wire. `aws_environment` is what every
test that starts a server of its own (a seeded one, a store's) sets.
"""

from __future__ import annotations

import pytest

from smlaunch.pipelines.sources.local_s3 import LocalS3
from support.environment import environment


def aws_environment(env: pytest.MonkeyPatch, endpoint: str, *, s3_only: bool = False) -> None:
    """Throwaway credentials, no profile, and `endpoint` for every AWS service (`s3_only`: for
    S3 alone, `AWS_ENDPOINT_URL_S3`), so nothing a test runs can reach real AWS."""
    for key, value in {**LocalS3.environment(), "AWS_PROFILE": None}.items():
        if value is None:
            env.delenv(key, raising=False)
        else:
            env.setenv(key, value)
    env.setenv("AWS_ENDPOINT_URL_S3" if s3_only else "AWS_ENDPOINT_URL", endpoint)


@pytest.fixture(scope="session")
def s3_endpoint():
    with LocalS3() as server:
        yield server.endpoint_url


@pytest.fixture
def s3(s3_endpoint, monkeypatch):
    """A boto3 S3 client of the session's server, with its environment set."""
    import boto3

    aws_environment(monkeypatch, s3_endpoint)
    return boto3.client("s3", endpoint_url=s3_endpoint)


@pytest.fixture(scope="module")
def moto_server(tmp_path_factory):
    """A server whose recorder can keep every request's raw body (`moto-api/recorder`)."""
    with (
        environment(MOTO_RECORDER_FILEPATH=str(tmp_path_factory.mktemp("moto") / "recording.jsonl")),
        LocalS3() as server,
    ):
        yield server
