"""The multi-host path with real processes: one `sm-launch` per fake SageMaker host, one real Ray
cluster across them. algo-1 is the CPU host; the GPU group lists algo-3 before algo-2. What such a
job survives (the head lost, SIGTERM to every host) is in `tests/reliability/test_host_loss.py`."""

import json
import os
import re
import time

import pytest

from support.sagemaker_job import HOSTS, FakeJob


@pytest.mark.ray
def test_three_hosts_join_train_and_all_exit_zero(tmp_path):
    """28 steps of 2 x 32 images: the first epoch (1437 rows, split unevenly) ends inside the run, so its
    accounting across the two ranks is complete."""
    job = FakeJob(tmp_path, steps=28)
    try:
        _three_hosts_join_train_and_all_exit_zero(job)
    finally:
        job.cleanup()


def _three_hosts_join_train_and_all_exit_zero(job):
    for host in HOSTS:
        job.start(host)
    codes = job.wait(300)
    assert codes == {h: 0 for h in HOSTS}, {h: job.log(h)[-2000:] for h in HOSTS}

    head_log = job.log("algo-2")
    assert "head algo-2 at " in head_log and "hosts_joined=3 " in head_log
    # The head's summary names the workers that train: placed on the GPUs the joined hosts reported
    # (none here), not on the ones the instance type (ml.g5.xlarge) promises.
    assert "batch 32 x 2 train workers (CPU)" in head_log and "train workers (GPU)" not in head_log
    assert head_log.index("hosts_joined=3 ") < head_log.index("batch 32 x 2 train workers (CPU)")
    for worker in ("algo-1", "algo-3"):
        assert f"{worker} joining head algo-2" in job.log(worker)
        assert "head algo-2 finished the job" in job.log(worker)
        # Workers leave within 10 s of the head (which exits last, after its own teardown).
        assert abs(job.exited["algo-2"] - job.exited[worker]) < 10
    report = json.loads((job.trees["algo-2"] / "output/data/report.json").read_text())
    assert report["summary"]["steps"] == 28
    # The head runs the same job body as a local run: the same timings, the run's wall time included.
    assert report["summary"]["wall_s"] > report["summary"]["train_s"] > 0 < report["summary"]["cluster_start_s"]
    assert report["rows_by_host"]["algo-1"] > 0 and report["summary"]["data_node_row_fraction"] == 1.0
    assert report["plan"]["head"] == "algo-2" and report["plan"]["head_address"] == f"algo-2:{job.port}"
    # Both GPU hosts train (on this machine without GPUs, one CPU rank each): DDP across two host
    # processes, rank 0 on the head, and the same weights on both at the end.
    assert [(w["rank"], w["host"]) for w in report["workers"]] == [(0, "algo-2"), (1, "algo-3")]
    assert report["summary"]["ranks_in_sync"] and report["summary"]["train_workers"] == 2
    first = report["sample_accounting"]["epochs"][0]
    assert (first["complete"], first["distinct"], first["duplicated"], first["missing"]) == (True, 1437, 0, 0), first
    assert report["summary"]["validation_accuracy"] > 0.3  # chance is 0.1
    assert (job.trees["algo-2"] / "model/model.pt").exists()
    assert not any(job.failure(h) for h in HOSTS)
    # The shared token authenticates every host and is printed nowhere.
    node_logs = [(job.trees[h] / "output/data/smlaunch/ray-node.log").read_text() for h in HOSTS]
    assert not any(job.token in text for text in node_logs + [job.log(h) for h in HOSTS])


@pytest.mark.ray
def test_a_host_that_never_joins_is_named_by_the_head_and_every_host_learns_why(tmp_path):
    """algo-1 starts with another token, so it never joins: to the head that is the same as a host
    that never started (it waits `join_timeout_s` for a host either way)."""
    job = FakeJob(tmp_path, join_timeout_s=25)
    try:
        started = time.monotonic()
        job.start("algo-2", "check")
        job.start("algo-3", "check")
        job.start("algo-1", "check", SMLAUNCH_RAY_TOKEN="0" * 64)
        codes = job.wait(120)
        assert codes == {"algo-1": 1, "algo-2": 1, "algo-3": 1}, {h: job.log(h)[-2000:] for h in codes}
        assert job.exited["algo-2"] - started < 25 + 30  # the deadline plus start-up and teardown
        named = r"hosts? algo-1(, algo-3)? did not join the Ray cluster within 25 s"
        assert re.search(named, job.failure("algo-2")), job.failure("algo-2")
        assert re.search("sm-launch: error: " + named, job.log("algo-2"))
        assert "refused this host's token: every host of the job needs the same SMLAUNCH_RAY_TOKEN" \
            in job.failure("algo-1")
        if "algo-3" in job.failure("algo-2"):  # on a loaded machine it may still have been joining
            assert "algo-2" in job.failure("algo-3")
        else:
            assert re.search("job failed on head algo-2: " + named, job.failure("algo-3")), job.failure("algo-3")
    finally:
        job.cleanup()


@pytest.mark.ray
def test_a_one_host_homogeneous_job_needs_no_token_and_checks_itself(tmp_path, configs):
    import subprocess
    import sys

    import yaml

    from smlaunch.cluster.host_tree import write_host_tree
    from support.ports import free_port

    tree = write_host_tree(tmp_path / "opt/ml", "algo-1", [{"instance_group_name": "homogeneousCluster",
                                                            "instance_type": "ml.g5.xlarge", "hosts": ["algo-1"]}],
                           {"train": "File", "validation": "File"})
    cfg = yaml.safe_load((configs / "tiny.yaml").read_text())
    cfg["cluster"] = {"instance_groups": [cfg["cluster"]["instance_groups"][0]], "port": free_port(),
                      "object_store_mb": 160}
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(cfg))
    env = {k: v for k, v in os.environ.items() if k not in ("SMLAUNCH_RAY_TOKEN", "RAY_AUTH_TOKEN", "RAY_ADDRESS")}
    env.update(SAGEMAKER_BASE_DIR=str(tree), TMPDIR="/tmp")
    out = subprocess.run([sys.executable, "-m", "smlaunch.launcher.cli", "check", str(tmp_path / "job.yaml")],
                         env=env, capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    assert "hosts_joined=1 " in out.stdout and "\nalgo-1: ok\n" in out.stdout
