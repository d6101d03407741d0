"""A stop reaches the launcher on the toolkit path too (issue 23, item 1; issue 41).

SageMaker's SIGTERM (StopTrainingJob, MaxRuntime, a spot interruption) goes to the container's PID 1.
Under the training toolkit, `train` gets it (from a PID 1 that forwards it), does not forward it
and exits at once. The launcher watches the process that started it (`SMLAUNCH_SUPERVISOR`, set by
the entry script) and takes the SIGTERM path when it is gone, if PID 1 lets it live that long
(test_pid1_kinds.py has the kinds). The job test below has both entry paths at once, each host in a
PID namespace of its own: two hosts under smlaunch-init and the toolkit, one host whose launcher is
PID 1 and gets the signal itself (the container path). Its next job, the resumed one, is also the
suite's plain multi-host job (`three_hosts_joined_trained_and_exited_zero`).
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

from smlaunch.cluster.process_tree import process_stat
from smlaunch.trainers.checkpoints import latest_complete
from support.namespaces import REAPING, launcher_pids, needs_pid_namespaces, pid1_of, pid_inside
from support.sagemaker_job import HOSTS, FakeJob

CHILD = """
import sys
from smlaunch.cluster.process_tree import supervisor
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
    tmp_path,
):
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
        unshares = {
            "algo-1": job.start(
                "algo-1",
                argv=[
                    "unshare",
                    "-pf",
                    "--mount-proc",
                    sys.executable,
                    "-m",
                    "smlaunch.launcher.cli",
                    "run",
                    str(job.config),
                ],
                SMLAUNCH_SIMULATED_HOST="",
            )
        }
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
            assert f"smlaunch-init: pid {pid} ({Path(sys.executable).name[:15]}) exited 143" in job.log(host), job.log(
                host
            )[-3000:]

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

        # The next job (spot: the same checkpoints on new hosts) resumes where this one stopped. It is the
        # plain multi-host job too: three hosts join, train and exit 0 (one job fewer in the suite).
        steps = max(28, stopped + 24)  # an epoch (1437 rows, 23 steps of 2 x 32) completes inside the run
        config = yaml.safe_load(job.config.read_text())
        config["trainer"]["steps"] = steps
        job.config.write_text(yaml.safe_dump(config))
        job.procs.clear()
        job.exited.clear()
        for host in HOSTS:
            job.start(host)
        resumed = three_hosts_joined_trained_and_exited_zero(job, steps)
        assert resumed["summary"]["resumed_at_step"] == stopped
    finally:
        job.cleanup()


def three_hosts_joined_trained_and_exited_zero(job, steps: int) -> dict:
    """The plain path with real processes, one `sm-launch` per fake SageMaker host (algo-1 the CPU
    host, the GPU group listing algo-3 before algo-2) and one Ray cluster across them: every host
    joins, the two GPU hosts train `steps` steps of 2 x 32 images by DDP, an epoch (split unevenly
    across the ranks) ends inside the run with each sample once, and every host exits 0. Returns the
    head's report."""
    codes = job.wait(420)
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
    assert report["summary"]["steps"] == steps
    # The head runs the same job body as a local run: the same timings, the run's wall time included.
    assert report["summary"]["wall_s"] > report["summary"]["train_s"] > 0 < report["summary"]["cluster_start_s"]
    assert report["rows_by_host"]["algo-1"] > 0 and report["summary"]["data_node_row_fraction"] == 1.0
    assert report["plan"]["head"] == "algo-2" and report["plan"]["head_address"] == f"algo-2:{job.port}"
    # Both GPU hosts train (on this machine without GPUs, one CPU rank each): DDP across two host
    # processes, rank 0 on the head, and the same weights on both at the end.
    assert [(w["rank"], w["host"]) for w in report["workers"]] == [(0, "algo-2"), (1, "algo-3")]
    assert report["summary"]["ranks_in_sync"] and report["summary"]["train_workers"] == 2
    # each complete epoch once across the two ranks (a resumed one: what was drawn before the stop
    # is its skipped rows)
    complete = [e for e in report["sample_accounting"]["epochs"] if e["complete"]]
    assert complete, report["sample_accounting"]
    for e in complete:
        assert (e["distinct"] + e["skipped_rows"], e["duplicated"], e["missing"]) == (1437, 0, 0), e
    assert report["summary"]["validation_accuracy"] > 0.3  # chance is 0.1
    assert (job.trees["algo-2"] / "model/model.pt").exists()
    assert not any(job.failure(h) for h in HOSTS)
    # The shared token authenticates every host and is printed nowhere.
    node_logs = [(job.trees[h] / "output/data/smlaunch/ray-node.log").read_text() for h in HOSTS]
    assert not any(job.token in text for text in node_logs + [job.log(h) for h in HOSTS])
    return report
