"""Name resolution with retries, interface addresses and the join wait, without Ray."""

import socket
import threading
import time

import pytest

from smlaunch.cluster.rendezvous import interface_address, resolve_host, wait_for_hosts, wait_for_port
from smlaunch.errors import UserError


def test_a_name_that_appears_late_is_found_before_the_deadline(tmp_path):
    hosts = tmp_path / "hosts"
    env = {"SMLAUNCH_HOSTS_FILE": str(hosts)}
    threading.Timer(1.0, lambda: hosts.write_text("# late\n10.1.2.3  algo-7 other\n")).start()
    started = time.monotonic()
    assert resolve_host("algo-7", 10, env) == "10.1.2.3"
    assert 0.9 < time.monotonic() - started < 5


def test_an_unknown_name_fails_naming_it_after_the_deadline(tmp_path):
    started = time.monotonic()
    with pytest.raises(UserError, match=r"host algo-99\.invalid did not resolve within 1 s"):
        resolve_host("algo-99.invalid", 1, {})
    assert time.monotonic() - started < 10


def test_interface_address():
    assert interface_address("lo") == "127.0.0.1"
    with pytest.raises(UserError, match=r"network interface 'ethX9' .* has no IPv4 address; interfaces here: .*lo"):
        interface_address("ethX9")


def test_port_wait_succeeds_when_something_listens_and_fails_with_the_deadline():
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        wait_for_port("127.0.0.1", server.getsockname()[1], 5, "test server")
        port = server.getsockname()[1]
    with pytest.raises(UserError, match=f"head at 127.0.0.1:{port} not reachable within 1 s"):
        wait_for_port("127.0.0.1", port, 1, "head")
    with pytest.raises(UserError, match="head stopped before"):
        wait_for_port("127.0.0.1", port, 30, "head", alive=lambda: False)


def test_join_wait_names_the_missing_hosts():
    seen = iter([set(), {"algo-2"}, {"algo-2", "algo-3"}])
    lines = []
    assert wait_for_hosts(lambda: next(seen), ["algo-2", "algo-3"], 10, lines.append) >= 0
    assert lines == ["0/2 hosts joined; waiting for algo-2, algo-3", "1/2 hosts joined; waiting for algo-3"]
    with pytest.raises(
        UserError,
        match=r"host algo-1 did not join the Ray cluster within 1 s "
        r"\(joined: algo-2\)",
    ):
        wait_for_hosts(lambda: {"algo-2"}, ["algo-1", "algo-2"], 1, lambda _: None)
