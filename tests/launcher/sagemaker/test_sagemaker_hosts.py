"""The multi-host path with real processes: one `sm-launch` per fake SageMaker host, one real Ray
cluster across them. algo-1 is the CPU host; the GPU group lists algo-3 before algo-2. What such a
job survives (the head lost, SIGTERM to every host) is in `tests/reliability/test_host_loss.py`. The
plain job that three hosts join, train and exit 0 from is the resumed job of
`tests/launcher/job/test_stopping.py` (`three_hosts_joined_trained_and_exited_zero`): one job fewer."""

import os
import re
import time

import pytest

from support.sagemaker_job import FakeJob


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
        assert "refused this host's token: every host of the job needs the same SMLAUNCH_RAY_TOKEN" in job.failure(
            "algo-1"
        )
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

    tree = write_host_tree(
        tmp_path / "opt/ml",
        "algo-1",
        [{"instance_group_name": "homogeneousCluster", "instance_type": "ml.g5.xlarge", "hosts": ["algo-1"]}],
        {"train": "File", "validation": "File"},
    )
    cfg = yaml.safe_load((configs / "tiny.yaml").read_text())
    cfg["cluster"] = {
        "instance_groups": [cfg["cluster"]["instance_groups"][0]],
        "port": free_port(),
        "object_store_mb": 160,
    }
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(cfg))
    env = {k: v for k, v in os.environ.items() if k not in ("SMLAUNCH_RAY_TOKEN", "RAY_AUTH_TOKEN", "RAY_ADDRESS")}
    env.update(SAGEMAKER_BASE_DIR=str(tree), TMPDIR="/tmp")
    out = subprocess.run(
        [sys.executable, "-m", "smlaunch.launcher.cli", "check", str(tmp_path / "job.yaml")],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    assert "hosts_joined=1 " in out.stdout and "\nalgo-1: ok\n" in out.stdout
