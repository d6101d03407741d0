"""What a multi-host job survives, with one real `sm-launch` process per fake SageMaker host and one
Ray cluster across them (issue 9, items 3 and 4). algo-1 is the CPU host; algo-2 is the head.

- The head host lost (SIGKILL): every worker launcher exits 1 within 30 s, with the reason in its
  failure file; none hangs on a billed cluster.
- SIGTERM to every host, as SageMaker sends on a stop or a spot interruption, is in
  `tests/launcher/test_stopping.py`: with the toolkit's `train` and with sm-launch as the entry
  process in one job, the head stops at a step boundary with a checkpoint, every launcher leaves
  within 30 s, no host writes a failure file, and the next job resumes.

A lost data host and a killed train worker are in `test_data_host_loss.py` and
`test_train_failures.py`.
"""

import os
import signal
import time

import pytest

from support.sagemaker_job import HOSTS


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
