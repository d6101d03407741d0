"""Finding each other: host names to addresses, the head's port, and who has joined.

On SageMaker `algo-N` names may not resolve for a while after the container starts
(sagemaker-python-sdk #138), so every lookup retries until a deadline and then fails naming the
host. Ray must listen on the job's `network_interface_name`, not whatever the hostname maps to.
A local simulation maps names to this machine with an /etc/hosts-style file named by
`SMLAUNCH_HOSTS_FILE`, read again on every retry so a test can make a name appear late.
"""

from __future__ import annotations

import fcntl
import logging
import os
import socket
import struct
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from smlaunch.errors import UserError

HOSTS_FILE_ENV = "SMLAUNCH_HOSTS_FILE"
RETRY_S = 0.5


def free_port() -> int:
    """A TCP port on 127.0.0.1 nobody listens on now (a local S3 server's, a simulated job's Ray head's)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _from_hosts_file(name: str, environ: Mapping[str, str]) -> str | None:
    path = environ.get(HOSTS_FILE_ENV)
    if not path or not Path(path).is_file():
        return None
    for line in Path(path).read_text().splitlines():
        fields = line.split("#", 1)[0].split()
        if len(fields) >= 2 and name in fields[1:]:
            return fields[0]
    return None


def resolve_host(name: str, timeout_s: float, environ: Mapping[str, str] = os.environ) -> str:
    """IPv4 address of `name`, retrying until `timeout_s`; UserError naming it after that."""
    deadline = time.monotonic() + timeout_s
    while True:
        address = _from_hosts_file(name, environ)
        if address:
            return address
        try:
            return str(socket.getaddrinfo(name, None, socket.AF_INET)[0][4][0])  # AF_INET: (host, port)
        except (socket.gaierror, UnicodeError) as exc:
            last = exc
        if time.monotonic() >= deadline:
            raise UserError(f"host {name} did not resolve within {timeout_s:.0f} s ({last}); is it part of this job?")
        time.sleep(RETRY_S)


def interface_address(interface: str) -> str:
    """IPv4 address of a network interface (SIOCGIFADDR); UserError listing the ones there are."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        try:
            packed = fcntl.ioctl(sock.fileno(), 0x8915, struct.pack("256s", interface[:15].encode()))
        except OSError:
            names = [n for _, n in socket.if_nameindex()]
            raise UserError(
                f"network interface {interface!r} (resourceconfig.json network_interface_name) "
                f"has no IPv4 address; interfaces here: {', '.join(names)}"
            ) from None
    return socket.inet_ntoa(packed[20:24])


def wait_for_port(host: str, port: int, timeout_s: float, what: str, alive: Callable[[], bool] = lambda: True) -> None:
    """Until something accepts TCP on host:port; UserError after `timeout_s` or once `alive()` is false."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            socket.create_connection((host, port), timeout=2).close()
            return
        except OSError as exc:
            last = exc
        if not alive():
            raise UserError(f"{what} stopped before {host}:{port} accepted connections")
        if time.monotonic() >= deadline:
            raise UserError(f"{what} at {host}:{port} not reachable within {timeout_s:.0f} s ({last})")
        time.sleep(RETRY_S)


def wait_for_hosts(
    joined: Callable[[], set[str]], expected: list[str], timeout_s: float, progress: Callable[[str], None] | None = None
) -> float:
    """Until every expected host has joined; returns the seconds it took, or UserError naming the missing."""
    progress = progress or logging.getLogger("smlaunch").info
    started = time.monotonic()
    deadline = started + timeout_s
    reported = None
    while True:
        present = joined()
        missing = [h for h in expected if h not in present]
        if not missing:
            return time.monotonic() - started
        if len(present) != reported:
            reported = len(present)
            progress(f"{len(expected) - len(missing)}/{len(expected)} hosts joined; waiting for {', '.join(missing)}")
        if time.monotonic() >= deadline:
            raise UserError(
                f"{'host' if len(missing) == 1 else 'hosts'} {', '.join(missing)} did not join the Ray cluster "
                f"within {timeout_s:.0f} s "
                f"(joined: {', '.join(sorted(present)) or 'none'}); check their logs"
            )
        time.sleep(RETRY_S)
