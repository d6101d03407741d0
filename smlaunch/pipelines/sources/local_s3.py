"""A real S3-protocol server on 127.0.0.1 for local runs and tests: moto in server mode.

A local run whose channels come from `s3://` exercises the same code as on SageMaker (listing,
ranged GETs, streaming bodies) against a server on this machine, seeded from local folders. The
server is a child process (moto's server is a Flask app; in a thread it would compete with the
driver for the GIL), bound to 127.0.0.1 only, and dies with its parent. Requests are signed with
throwaway credentials that `environment()` provides, so real AWS credentials are never sent.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

from smlaunch.cluster.node import die_with_parent
from smlaunch.cluster.rendezvous import free_port
from smlaunch.errors import UserError

START_TIMEOUT_S = 30.0
CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "smlaunch-local",
    "AWS_SECRET_ACCESS_KEY": "smlaunch-local",
    "AWS_SESSION_TOKEN": None,
    "AWS_DEFAULT_REGION": "us-east-1",
}


class LocalS3:
    """Context manager: start the server, create buckets and upload seed folders, stop it on exit."""

    def __init__(self, seeds: dict[str, Path] | None = None):
        self.seeds = seeds or {}
        """`s3://bucket/prefix` -> local folder whose files are uploaded under that prefix."""
        self.endpoint_url: str | None = None
        self._server: subprocess.Popen | None = None

    @staticmethod
    def environment() -> dict[str, str | None]:
        """Variables for processes that talk to this server (None: unset)."""
        return dict(CREDENTIALS)

    def __enter__(self) -> LocalS3:
        port = free_port()
        self._server = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            preexec_fn=die_with_parent,
        )
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if self._server.poll() is not None or time.monotonic() > deadline:
                    self.__exit__(None, None, None)
                    raise UserError(
                        f"the local S3 server (moto) did not start on 127.0.0.1:{port} within "
                        f"{START_TIMEOUT_S:.0f} s; is moto[server] installed?"
                    ) from None
                time.sleep(0.1)
        self.endpoint_url = f"http://127.0.0.1:{port}"
        try:
            for uri, folder in self.seeds.items():
                self.upload(folder, uri)
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def client(self):
        import boto3

        session = boto3.session.Session(
            aws_access_key_id=CREDENTIALS["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
            region_name=CREDENTIALS["AWS_DEFAULT_REGION"],
        )
        return session.client("s3", endpoint_url=self.endpoint_url)

    def upload(self, folder: str | Path, uri: str) -> int:
        """Upload every file under `folder` to `s3://bucket/prefix/<relative path>`; returns the count."""
        bucket, _, prefix = uri.removeprefix("s3://").partition("/")
        client = self.client()
        existing = {b["Name"] for b in client.list_buckets().get("Buckets", [])}
        if bucket not in existing:
            client.create_bucket(Bucket=bucket)
        root = Path(folder)
        files = sorted(p for p in root.rglob("*") if p.is_file() and not p.name.startswith("."))
        if not files:
            raise UserError(f"local S3 seed {folder} for {uri} holds no files")
        base = prefix.rstrip("/") + "/" if prefix else ""
        from smlaunch.console import Progress

        with Progress(f"seeding {uri}", total=len(files), unit="file", leave=False) as bar:
            for path in files:
                client.upload_file(str(path), bucket, base + str(path.relative_to(root)))
                bar.update()
        return len(files)

    def __exit__(self, *exc) -> None:
        if self._server is not None:
            self._server.terminate()
            try:
                self._server.wait(10)
            except subprocess.TimeoutExpired:
                self._server.kill()
                self._server.wait(10)
            self._server = None
