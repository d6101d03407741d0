"""`sm-launch check --address` against a Ray cluster started as an operator would: plain
`ray start` processes on 127.0.0.1 (a head and two labelled workers, token authentication),
which smlaunch must use as it finds them and leave running."""

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from smlaunch.pipelines.sources.local_s3 import free_port

ROOT = Path(__file__).resolve().parents[2]
HETERO = str(ROOT / "configs" / "hetero.yaml")
RAY = str(Path(sys.executable).parent / "ray")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """A head labelled as the train group, and two data-group workers; killed at the end."""
    tmp = tmp_path_factory.mktemp("operator")
    ray_tmp = tempfile.mkdtemp(prefix="smr-", dir="/tmp")  # Ray's socket paths must stay under 108 bytes
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env.update(RAY_USAGE_STATS_ENABLED="0", RAY_AUTH_MODE="token", RAY_AUTH_TOKEN="t" * 32)
    common = ["--num-cpus=1", "--disable-usage-stats", "--block", "--object-store-memory=100000000"]
    nodes = [["--head", f"--port={port}", "--node-ip-address=127.0.0.1", "--include-dashboard=false",
              f"--temp-dir={ray_tmp}", "--labels=ray-subcluster=train,sm-group=train_group"]]
    nodes += [[f"--address=127.0.0.1:{port}", "--labels=ray-subcluster=data,sm-group=data_group"]] * 2
    procs = []
    try:
        for i, args in enumerate(nodes):
            log = tmp / f"node-{i}.log"
            procs.append((subprocess.Popen([RAY, "start", *args, *common], env=env, stdout=log.open("wb"),
                                           stderr=subprocess.STDOUT, start_new_session=True), log))
            deadline = time.monotonic() + 90
            while "Ray runtime started" not in log.read_text(errors="replace"):
                assert time.monotonic() < deadline and procs[-1][0].poll() is None, log.read_text()[-2000:]
                time.sleep(0.2)
        yield f"127.0.0.1:{port}", env
    finally:
        for proc, _ in reversed(procs):
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc, _ in procs:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
        shutil.rmtree(ray_tmp, ignore_errors=True)


def sm_launch(env: dict, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "smlaunch", *args], env=env, capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT)


def alive_nodes(address: str, env: dict) -> list[dict]:
    code = ("import json, ray; ray.init(address=%r, logging_level='ERROR', log_to_driver=False); "
            "print(json.dumps([n['Labels'] for n in ray.nodes() if n['Alive']]))") % address
    ran = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert ran.returncode == 0, ran.stderr[-2000:]
    import json

    return json.loads(ran.stdout.strip().splitlines()[-1])


def test_check_matches_the_labelled_nodes_runs_a_task_on_each_and_leaves_the_cluster_running(cluster):
    address, env = cluster
    ran = sm_launch(env, "check", HETERO, "--address", address)
    assert ran.returncode == 0, ran.stderr[-3000:]
    lines = ran.stdout.strip().splitlines()
    assert lines[-1].startswith(f"cluster at {address}: every group has its nodes and each ran a task; "
                                "train_group: 1 node (")
    assert "data_group: 2 nodes (" in lines[-1] and lines[-1].endswith("1 train workers on CPUs")
    assert "note: train_group: no GPU on its nodes; 1 CPU workers (gloo) stand in" in ran.stdout
    # RAY_ADDRESS says the same as --address
    assert sm_launch({**env, "RAY_ADDRESS": address}, "check", HETERO).returncode == 0
    labels = alive_nodes(address, env)
    assert sorted(n["sm-group"] for n in labels) == ["data_group", "data_group", "train_group"]


def test_a_missing_group_label_and_a_run_are_refused_in_one_line_before_any_work(cluster):
    address, env = cluster
    ran = sm_launch(env, "check", HETERO, "--address", address, "--set", "cluster.node_labels={data_group: {pool: cpu}}")
    assert ran.returncode == 1
    assert ran.stderr.strip().splitlines() == [
        f"sm-launch: error: cluster at {address}: no node for instance group data_group (labels pool=cpu); the "
        "cluster's 3 nodes carry ray-subcluster=data, ray-subcluster=train, sm-group=data_group, "
        "sm-group=train_group (cluster.node_labels maps a group to other labels)"]
    ran = sm_launch({**env, "RAY_ADDRESS": address}, HETERO)
    assert ran.returncode == 1 and "not built yet" in ran.stderr and len(ran.stderr.strip().splitlines()) == 1
    assert not (ROOT / "runs").exists() or not any("hetero-digits" in p.name and p.stat().st_mtime > time.time() - 60
                                                   for p in (ROOT / "runs").iterdir())


def test_an_address_where_nothing_listens_fails_within_seconds():
    started = time.monotonic()
    ran = sm_launch(dict(os.environ), "check", HETERO, "--address", f"127.0.0.1:{free_port()}")
    assert ran.returncode == 1 and time.monotonic() - started < 30
    assert "not reachable within 10 s" in ran.stderr and len(ran.stderr.strip().splitlines()) == 1
