"""What a multi-host job survives, with one real `sm-launch` process per fake SageMaker host and one
Ray cluster across them (issue 9, items 3 and 4). algo-1 is the CPU host; algo-2 is the head.

- The head host lost (SIGKILL): every worker launcher exits 1 within 30 s, with the reason in its
  failure file; none hangs on a billed cluster.
- SIGTERM to every host, as SageMaker sends on a stop or a spot interruption: the head stops at a
  step boundary with a checkpoint, every host exits 143 well inside SageMaker's 120 s, and no host
  writes a failure file (a stop is not a failure).

A lost data host and a killed train worker are in `test_data_host_loss.py` and
`test_train_failures.py`.
"""

import json
import os
import signal
import time

import pytest

from sagemaker_job import HOSTS, FakeJob


@pytest.mark.ray
def test_killing_the_head_makes_workers_exit_nonzero_within_30s(job):
    for host in HOSTS:
        job.start(host)
    job.wait_for_text("algo-2", "step=2 ", 240)
    os.kill(job.procs["algo-2"].pid, signal.SIGKILL)
    killed = time.monotonic()
    codes = job.wait(60)
    for worker in ("algo-1", "algo-3"):
        assert codes[worker] == 1, job.log(worker)[-2000:]
        assert job.exited[worker] - killed < 30
        assert "lost the head algo-2" in job.failure(worker)


@pytest.mark.ray
def test_sigterm_stops_at_a_step_boundary_with_a_checkpoint_and_every_host_leaves(tmp_path):
    job = FakeJob(tmp_path, steps=400)
    try:
        for host in HOSTS:
            job.start(host)
        job.wait_for_text("algo-2", "step=4 ", 240)
        signalled = time.monotonic()
        for host in HOSTS:  # SageMaker signals every container
            os.kill(job.procs[host].pid, signal.SIGTERM)
        codes = job.wait(120)
        assert codes == {h: 143 for h in HOSTS}, {h: job.log(h)[-2000:] for h in HOSTS}
        assert max(job.exited.values()) - signalled < 60  # well inside SageMaker's 120 s
        head = job.log("algo-2")
        report = json.loads((job.trees["algo-2"] / "output/data/report.json").read_text())
        stopped = report["summary"]["stopped_at_step"]
        assert f"stopped at step {stopped} on request; checkpoint written" in head
        assert f"stopped early at step {stopped}" in head
        assert 4 <= stopped < 400 and len(report["steps"]) == stopped
        checkpoints = list((job.trees["algo-2"] / "checkpoints").rglob("state.pt"))
        assert checkpoints, "no checkpoint written on stop"
        assert not any(job.failure(h) for h in HOSTS)
    finally:
        job.cleanup()
