"""moto's server on 127.0.0.1 as S3 and SageMaker (`support.s3.moto_server`), for the `submit`
tests (`test_submit*.py`).

Moto's recorder keeps the raw body of every request the server receives, so a test sees the
CreateTrainingJob request as it went over the wire."""

import base64
import json
import uuid

import pytest
import requests

from smlaunch.pipelines.sources.local_s3 import LocalS3
from support.s3 import aws_environment


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
        return [
            json.loads(e["body"])
            for e in self.recorded()
            if {k.lower(): v for k, v in e["headers"].items()}.get("x-amz-target") == "SageMaker.CreateTrainingJob"
        ]

    def keys(self, prefix: str = "", bucket: str | None = None) -> list[str]:
        listing = self.s3.list_objects_v2(Bucket=bucket or self.bucket, Prefix=prefix)
        return [o["Key"] for o in listing.get("Contents", [])]


@pytest.fixture
def aws(moto_server, monkeypatch):
    aws_environment(monkeypatch, moto_server.endpoint_url)
    handle = Aws(moto_server)
    requests.post(f"{handle.endpoint}/moto-api/recorder/reset-recording", timeout=10)
    requests.post(f"{handle.endpoint}/moto-api/recorder/start-recording", timeout=10)
    yield handle
    requests.post(f"{handle.endpoint}/moto-api/recorder/stop-recording", timeout=10)
