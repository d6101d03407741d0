"""moto's server on 127.0.0.1 as S3 and SageMaker, for the `submit` tests (`test_submit*.py`).

Moto's recorder keeps the raw body of every request the server receives, so a test sees the
CreateTrainingJob request as it went over the wire."""

import base64
import json
import uuid

import pytest
import requests

from smlaunch.pipelines.sources.local_s3 import LocalS3
from support.environment import environment


@pytest.fixture(scope="module")
def moto_server(tmp_path_factory):
    with environment(MOTO_RECORDER_FILEPATH=str(tmp_path_factory.mktemp("moto") / "recording.jsonl")), \
            LocalS3() as server:
        yield server


class Aws:
    def __init__(self, server: LocalS3):
        self.endpoint = server.endpoint_url
        self.s3 = server.client()
        self.bucket = f"submit-{uuid.uuid4().hex[:12]}"
        self.s3.create_bucket(Bucket=self.bucket)

    def recorded(self) -> list[dict]:
        text = requests.get(f"{self.endpoint}/moto-api/recorder/download-recording", timeout=10).text
        entries = [json.loads(line) for line in text.splitlines() if line.strip()]
        for entry in entries:
            body = entry.get("body") or ""
            entry["body"] = base64.b64decode(body) if entry.get("body_encoded") else body.encode()
        return entries

    def create_requests(self) -> list[dict]:
        return [json.loads(e["body"]) for e in self.recorded()
                if {k.lower(): v for k, v in e["headers"].items()}.get("x-amz-target") == "SageMaker.CreateTrainingJob"]

    def keys(self, prefix: str = "", bucket: str | None = None) -> list[str]:
        listing = self.s3.list_objects_v2(Bucket=bucket or self.bucket, Prefix=prefix)
        return [o["Key"] for o in listing.get("Contents", [])]


@pytest.fixture
def aws(moto_server, monkeypatch):
    for key, value in LocalS3.environment().items():
        if value is None:
            monkeypatch.delenv(key, raising=False)
        else:
            monkeypatch.setenv(key, value)
    monkeypatch.setenv("AWS_ENDPOINT_URL", moto_server.endpoint_url)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    handle = Aws(moto_server)
    requests.post(f"{handle.endpoint}/moto-api/recorder/reset-recording", timeout=10)
    requests.post(f"{handle.endpoint}/moto-api/recorder/start-recording", timeout=10)
    yield handle
    requests.post(f"{handle.endpoint}/moto-api/recorder/stop-recording", timeout=10)
