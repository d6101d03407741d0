"""A real S3-protocol server on 127.0.0.1 (moto in server mode), one per test session."""

import socket
import subprocess
import sys
import time

import pytest


@pytest.fixture(scope="session")
def s3_endpoint():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            assert time.monotonic() < deadline and server.poll() is None, "moto server did not start"
            time.sleep(0.1)
    yield f"http://127.0.0.1:{port}"
    server.terminate()
    server.wait(10)


@pytest.fixture
def s3(s3_endpoint, monkeypatch):
    """A boto3 S3 client of the local server, with throwaway credentials."""
    import boto3

    for key, value in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                       "AWS_DEFAULT_REGION": "us-east-1", "AWS_ENDPOINT_URL": s3_endpoint}.items():
        monkeypatch.setenv(key, value)
    return boto3.client("s3", endpoint_url=s3_endpoint)
