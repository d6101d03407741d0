"""A stop reaches the launcher on the toolkit path too (issue 23, item 1; issue 41).

SageMaker's SIGTERM (StopTrainingJob, MaxRuntime, a spot interruption) goes to the container's PID 1.
Under the training toolkit, `train` gets it (from a PID 1 that forwards it), does not forward it
and exits at once. The launcher watches the process that started it (`SMLAUNCH_SUPERVISOR`, set by
the entry script) and takes the SIGTERM path when it is gone, if PID 1 lets it live that long
(test_pid1_kinds.py has the kinds). The job test below has both entry paths at once, each host in a
PID namespace of its own: two hosts under smlaunch-init and the toolkit, one host whose launcher is
PID 1 and gets the signal itself (the container path).
"""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from support.namespaces import REAPING, launcher_pids, needs_pid_namespaces, pid1_of, pid_inside
from support.sagemaker_job import HOSTS, FakeJob
from smlaunch.launcher.job.supervisor import process_stat
from smlaunch.trainers.checkpoints import latest_complete

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
@needs_pid_namespaces
def test_a_stop_under_smlaunch_init_and_as_pid_1_checkpoints_every_launcher_exits_143_and_the_next_job_resumes(
        tmp_path):
    """One 3-host job, each host in a PID namespace of its own as a container is, SageMaker's SIGTERM sent
    to each namespace's PID 1 from outside (docker stop). algo-1 is the container entry: sm-launch is PID 1
    and gets the signal itself. The head (algo-2) and algo-3 run the toolkit's real `train` under
    smlaunch-init (`launcher/reaping_init.py`), through a framework module that pipes the entry's stdout
    and stderr to `train` as the PyTorch images do (`capture_error=True`). `train` dies at once; both
    launchers see it, keep writing their logs (no BrokenPipeError), checkpoint at the same step and exit
    143, which smlaunch-init reports from inside the namespace; algo-1's 143 is its namespace's own status.
    The other kinds of PID 1 are in test_pid1_kinds.py."""
    pytest.importorskip("sagemaker_training")
    job = FakeJob(tmp_path, steps=400)
    try:
        unshares = {"algo-1": job.start("algo-1", argv=["unshare", "-pf", "--mount-proc", sys.executable, "-m",
                                                        "smlaunch.launcher.cli", "run", str(job.config)],
                                        SMLAUNCH_SIMULATED_HOST="")}
        unshares |= {h: job.start_under_toolkit(h, pid1=REAPING, capture_error=True) for h in ("algo-2", "algo-3")}
        job.wait_for_text("algo-2", "step=4 ", 300)
        launchers = launcher_pids({h: unshares[h] for h in ("algo-2", "algo-3")})
        assert len(launchers) == 2
        inside = {h: pid_inside(p) for h, p in launchers.items()}
        assert "PID 1 is sm-launch itself" in job.log("algo-1")
        assert "PID 1 is smlaunch-init" in job.log("algo-2") and "a stop checkpoints" in job.log("algo-3")
        signalled = time.monotonic()
        for unshare in unshares.values():  # SageMaker signals every container's PID 1
            os.kill(pid1_of(unshare), signal.SIGTERM)
        assert job.wait(60) == {h: 143 for h in HOSTS}, {h: job.log(h)[-2000:] for h in HOSTS}
        assert time.monotonic() - signalled < 60
        for host, pid in inside.items():  # the launcher's own status, as the namespace's init reaped it
            assert f"smlaunch-init: pid {pid} ({Path(sys.executable).name[:15]}) exited 143" in job.log(host), \
                job.log(host)[-3000:]

        head = job.log("algo-2")
        assert "the training toolkit (pid" in head
        report = json.loads((job.trees["algo-2"] / "output/data/report.json").read_text())
        stopped = report["summary"]["stopped_at_step"]
        assert f"stopped at step {stopped} on request; checkpoint written" in head
        assert f"stopped early at step {stopped}" in head
        assert 4 <= stopped < 400 and len(report["steps"]) == stopped
        # The newest complete checkpoint is the stopped step's: the stop's own, or a timed one written at
        # that very step (then the stop does not write the same state twice).
        written = report["summary"]["checkpoints_written"]
        assert written.get("stop", 0) + written.get("timer", 0) + written.get("interval", 0) >= 1, written
        newest = latest_complete(job.trees["algo-2"] / "checkpoints")
        assert newest and json.loads((Path(newest) / "meta.json").read_text())["step"] == stopped, newest
        for host in ("algo-2", "algo-3"):  # the pipes' reader died: nothing broke, and the log file has the rest
            log_file = (job.trees[host] / "output/data/smlaunch/sm-launch.log").read_text()
            assert "BrokenPipeError" not in job.log(host) + log_file
            assert "the training toolkit (pid" in log_file, log_file[-2000:]
            assert any(last in log_file.splitlines()[-1] for last in (f"{host}: ", "report: ")), log_file[-2000:]
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
