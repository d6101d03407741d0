"""A stop reaches the launcher on the toolkit path too (issue 23, item 1).

SageMaker's SIGTERM (StopTrainingJob, MaxRuntime, a spot interruption) goes to the training
toolkit's `train` when the toolkit starts the job; it does not forward it and exits at once. The
launcher watches the process that started it (`SMLAUNCH_SUPERVISOR`, set by the entry script) and
takes the SIGTERM path when it is gone. The job test below has both paths at once: two hosts under
the toolkit, one host whose launcher gets the signal itself (the container path).
"""

import json
import os
import signal
import subprocess
import sys
import time

import pytest
import yaml

from support.sagemaker_job import HOSTS, FakeJob
from smlaunch.launcher.job.supervisor import process_stat

CHILD = """
import sys
from smlaunch.launcher.job.supervisor import supervisor
from smlaunch.launcher.job.stopping import StopRequest, watch_supervisor

out = sys.argv[1]
stop = StopRequest()
watched = supervisor()
open(out, "w").write(f"{watched}\\n")
watch_supervisor(stop, watched, poll_s=0.1)
stopped = stop.event.wait(30)
for _ in range(100):
    print("after the toolkit: its pipe has no reader", file=sys.stderr, flush=True)
open(out, "a").write(f"{stopped} {stop.signal_name}\\n")
"""

TOOLKIT = """
import subprocess, sys, time
# as the toolkit's runners do: the entry script as a child, stderr piped to the toolkit (capture_error)
subprocess.Popen(["sh", "-c", f"{sys.executable} {sys.argv[1]} {sys.argv[2]}; :"], stderr=subprocess.PIPE)
time.sleep(120)
"""


def alive(pid: int) -> bool:
    stat = process_stat(pid)
    return stat is not None and stat[0] not in ("Z", "X")


def test_the_launcher_stops_once_the_toolkit_that_started_it_exits_through_a_shell_and_a_dead_pipe(tmp_path):
    (tmp_path / "child.py").write_text(CHILD)
    out = tmp_path / "out.txt"
    toolkit = subprocess.Popen([sys.executable, "-c", TOOLKIT, str(tmp_path / "child.py"), str(out)])
    try:
        deadline = time.monotonic() + 30
        while not out.exists() or not out.read_text().endswith("\n"):
            assert time.monotonic() < deadline, "the child never started"
            time.sleep(0.05)
        pid, start = out.read_text().split()[0].split(":")
        assert int(pid) == toolkit.pid and start == process_stat(toolkit.pid)[2]  # the shell was looked through
        toolkit.send_signal(signal.SIGTERM)
        assert toolkit.wait(10) == -signal.SIGTERM  # the toolkit's way: no handler, gone at once
        while len(out.read_text().splitlines()) < 2:
            assert time.monotonic() < deadline + 10, out.read_text()
            time.sleep(0.05)
        # stopped, named, and still alive after 100 writes to the pipe the toolkit held
        assert out.read_text().splitlines()[1] == "True toolkit exit"
    finally:
        toolkit.kill()


def test_a_process_that_is_not_watched_is_not_stopped():
    from smlaunch.launcher.job.stopping import StopRequest, watch_supervisor

    assert watch_supervisor(StopRequest(), None) is None
    stop = StopRequest()
    watch_supervisor(stop, f"{os.getpid()}:{process_stat(os.getpid())[2]}", poll_s=0.05)
    assert not stop.event.wait(0.5)  # the watched process is alive
    watch_supervisor(stop, f"{os.getpid()}:1", poll_s=0.05)  # the same pid, another start time: a reused pid
    assert stop.event.wait(5) and stop.signal_name == "toolkit exit"


@pytest.mark.ray
def test_sigterm_on_both_entry_paths_checkpoints_every_launcher_leaves_and_the_next_job_resumes(tmp_path):
    """One 3-host job with both entry paths, as a stop reaches them: the head (algo-2) and algo-3
    run under the toolkit's real `train` and SageMaker's SIGTERM goes to `train`; algo-1 runs
    sm-launch as the container's PID 1 would and gets the SIGTERM itself."""
    pytest.importorskip("sagemaker_training")
    job = FakeJob(tmp_path, steps=400)
    try:
        job.start("algo-1")
        trains = {h: job.start_under_toolkit(h) for h in ("algo-2", "algo-3")}
        job.wait_for_text("algo-2", "step=4 ", 300)
        launchers = {job.procs["algo-1"].pid}
        for train in trains.values():
            children = subprocess.run(["ps", "-o", "pid=", "--ppid", str(train.pid)], capture_output=True, text=True)
            launchers |= {int(p) for p in children.stdout.split()}
        assert len(launchers) == 3
        signalled = time.monotonic()
        for host in HOSTS:  # SageMaker signals every container's entry process
            job.procs[host].send_signal(signal.SIGTERM)
        assert {h: t.wait(10) for h, t in trains.items()} == {h: -signal.SIGTERM for h in trains}  # gone at once
        while any(alive(p) for p in launchers) and time.monotonic() - signalled < 30:
            time.sleep(0.2)
        assert not any(alive(p) for p in launchers), {h: job.log(h)[-2000:] for h in HOSTS}
        assert job.wait(5)["algo-1"] == 143

        head = job.log("algo-2")
        assert "the training toolkit (pid" in head
        report = json.loads((job.trees["algo-2"] / "output/data/report.json").read_text())
        stopped = report["summary"]["stopped_at_step"]
        assert f"stopped at step {stopped} on request; checkpoint written" in head
        assert f"stopped early at step {stopped}" in head
        assert 4 <= stopped < 400 and len(report["steps"]) == stopped
        assert list((job.trees["algo-2"] / "checkpoints").rglob("state.pt")), "no checkpoint written on stop"
        # a stop is not a failure; and the toolkit, gone, reported no success either
        for host in HOSTS:
            assert job.failure(host) is None, job.failure(host)
            assert not (job.trees[host] / "output" / "success").exists()

        # The next job (spot: the same checkpoints on new hosts) resumes where this one stopped.
        config = yaml.safe_load(job.config.read_text())
        config["trainer"]["steps"] = stopped + 2
        job.config.write_text(yaml.safe_dump(config))
        job.procs.clear()
        job.exited.clear()
        for host in HOSTS:
            job.start(host)
        assert job.wait(420) == {h: 0 for h in HOSTS}, {h: job.log(h)[-2000:] for h in HOSTS}
        resumed = json.loads((job.trees["algo-2"] / "output/data/report.json").read_text())["summary"]
        assert resumed["resumed_at_step"] == stopped
    finally:
        job.cleanup()
