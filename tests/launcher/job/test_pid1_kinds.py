"""What a SageMaker stop does under each kind of PID 1, tried as it happens (issue 41).

Each host runs as a container does: in a PID namespace of its own (`unshare -pf --mount-proc`),
PID 1 the image's init or entry script, `train` (the real `sagemaker-training` toolkit) under it,
the entry script and sm-launch under `train`. SageMaker's stop is `docker stop`'s: SIGTERM to each
namespace's PID 1, sent from outside; SIGKILL 120 s later. What each kind gives:

- tini (or `docker --init`, dumb-init) forwards, then exits with its child: `train` dies, tini
  returns, the kernel kills every process of the namespace: no checkpoint, no exit status inside;
  the next job resumes from the last timed checkpoint.
- bash running the entry as a child (AWS's framework images) has no handler, so the kernel drops
  the signal: training goes on until the SIGKILL; the next job resumes from the last periodic
  checkpoint.
- smlaunch-init (`launcher/reaping_init.py`) forwards, then waits for every process: `train` dies,
  sm-launch sees it, checkpoints and exits 143 (the init reports it): tests/launcher/job/
  test_stopping.py, with sm-launch as PID 1 (container entry) beside it.

The inits meet a stand-in workload first (no Ray, a second each); then bash and tini meet a real
two-host job in turn, the second job resuming the first's checkpoints. Where tini is not
installed its stand-in (`support/tini_standin.py`) takes its place, checked against tini here
wherever both exist.
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from smlaunch.cluster.process_tree import process_stat
from smlaunch.trainers.checkpoints import latest_complete
from support.namespaces import REAPING, STAND_IN, launcher_pids, needs_pid_namespaces, pid1_of
from support.sagemaker_job import FakeJob

ROOT = Path(__file__).resolve().parents[3]
TINI = [shutil.which("tini"), "--"] if shutil.which("tini") else STAND_IN
TWO_HOSTS = [
    {"instance_group_name": "data_group", "instance_type": "ml.c5.xlarge", "hosts": ["algo-1"]},
    {"instance_group_name": "train_group", "instance_type": "ml.g5.xlarge", "hosts": ["algo-2"]},
]
pytestmark = needs_pid_namespaces


def alive(pid: int) -> bool:
    stat = process_stat(pid)
    return stat is not None and stat[0] not in ("Z", "X")


# A stand-in for `train` and sm-launch: `train` has no SIGTERM handler; its child (the launcher's
# part) stops when its parent is gone, takes a second to "checkpoint", writes a mark and exits 143.
WORKLOAD = """
import os, subprocess, sys, time
out = sys.argv[1]
print(open("/proc/1/comm").read().strip(), flush=True)
launcher = subprocess.Popen([sys.executable, "-c", '''
import os, signal, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
parent = os.getppid()
open(sys.argv[1] + ".pid", "w").write(str(os.getpid()))
while os.getppid() == parent:
    time.sleep(0.02)
time.sleep(1.0)
open(sys.argv[1], "w").write("checkpointed")
sys.exit(143)
''', out])
launcher.wait()
"""


@pytest.mark.parametrize(
    "init, comm, checkpointed",
    [
        pytest.param(STAND_IN, "tini", False, id="tini-stand-in"),
        *([pytest.param([shutil.which("tini"), "--"], "tini", False, id="tini")] if shutil.which("tini") else []),
        pytest.param(REAPING, "smlaunch-init", True, id="smlaunch-init"),
        pytest.param(["bash", "-m", "-c", '"$@"; exit $?', "entry"], "bash", None, id="bash"),
    ],
)
def test_each_pid1_meets_a_stop_as_its_kind_says_in_a_real_namespace(tmp_path, init, comm, checkpointed):
    """tini and its stand-in: PID 1 exits with `train` (143) and the kernel kills the launcher before its
    checkpoint. smlaunch-init: the launcher checkpoints and its 143 is reported from inside. bash: the
    signal is dropped and nothing moves until the SIGKILL."""
    (tmp_path / "workload.py").write_text(WORKLOAD)
    out = tmp_path / "mark"
    unshare = subprocess.Popen(
        ["unshare", "-pf", "--mount-proc", *init, sys.executable, str(tmp_path / "workload.py"), str(out)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        pid1 = pid1_of(unshare)
        deadline = time.monotonic() + 20
        while not Path(f"{out}.pid").exists():
            assert time.monotonic() < deadline, "the workload never started"
            time.sleep(0.02)
        os.kill(pid1, signal.SIGTERM)  # from outside the namespace, as docker stop
        if checkpointed is None:  # dropped: everything still runs 2 s later; then SageMaker's SIGKILL
            time.sleep(2)
            assert alive(pid1) and not out.exists()
            os.kill(pid1, signal.SIGKILL)
        status = unshare.wait(20)
        printed = unshare.stdout.read()
    finally:
        unshare.kill()
    assert comm in printed.splitlines()  # the workload's /proc/1/comm: how sm-launch tells the kinds apart
    if checkpointed is None:
        # killed (unshare reports a SIGKILLed child as its own exit 1: it cannot re-raise SIGKILL on itself)
        assert status != 0 and not alive(pid1) and not out.exists()
    elif checkpointed:
        assert status == 143 and out.read_text() == "checkpointed"
        launcher = Path(f"{out}.pid").read_text()  # its pid inside the namespace
        assert f"smlaunch-init: pid {launcher} (python" in printed and printed.rstrip().endswith("exited 143"), printed
    else:
        assert status == 143 and not out.exists(), printed  # tini returns train's status; the launcher was killed


def test_smlaunch_init_under_another_init_still_waits_for_the_launcher_and_resets_ignored_signals(tmp_path):
    """Not PID 1 (as under `docker run --init`), smlaunch-init is a child subreaper: the launcher,
    orphaned when `train` dies, still comes to it and is waited for. Its children start with SIGPIPE
    handled by default, not ignored as Python leaves it."""
    (tmp_path / "workload.py").write_text(WORKLOAD)
    out = tmp_path / "mark"
    init = subprocess.Popen(
        [
            *REAPING,
            "sh",
            "-c",
            f"grep SigIgn /proc/self/status > {tmp_path}/sigign; "
            f"exec {sys.executable} {tmp_path / 'workload.py'} {out}",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline = time.monotonic() + 20
        while not Path(f"{out}.pid").exists():
            assert time.monotonic() < deadline, "the workload never started"
            time.sleep(0.02)
        init.send_signal(signal.SIGTERM)
        assert init.wait(20) == 143
        printed = init.stdout.read()
    finally:
        init.kill()
    assert out.read_text() == "checkpointed"  # waited for: it had a second to write it
    assert f"smlaunch-init: pid {Path(f'{out}.pid').read_text()} (python" in printed, printed
    ignored = int((tmp_path / "sigign").read_text().split()[1], 16)
    assert not ignored >> (signal.SIGPIPE - 1) & 1 and not ignored >> (signal.SIGXFSZ - 1) & 1


CLASSIFY = "from smlaunch.cluster.process_tree import read_pid1; p = read_pid1(); print(p.kind, p.name)"


@pytest.mark.parametrize(
    "init, kind",
    [
        (TINI, "exits_with_child tini"),
        (REAPING, "reaping smlaunch-init"),
        (["bash", "-m", "-c", '"$@"; exit $?', "entry"], "no_handler bash"),
        (
            [
                sys.executable,
                "-c",
                "import signal, subprocess, sys; signal.signal(signal.SIGTERM, lambda *a: None); "
                "sys.exit(subprocess.call(sys.argv[1:]))",
            ],
            None,
        ),
        ([], "launcher sm-launch"),
    ],
)
def test_read_pid1_tells_each_kind_apart_from_inside_its_namespace(init, kind):
    done = subprocess.run(
        ["unshare", "-pf", "--mount-proc", *init, sys.executable, "-c", CLASSIFY],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 0, done.stderr
    name = Path(sys.executable).name[:15]
    assert done.stdout.split("\n")[0] == (kind or f"unknown {name}")


def _two_host_job(tmp_path, **trainer) -> FakeJob:
    job = FakeJob(tmp_path, steps=400, layout=TWO_HOSTS)
    config = yaml.safe_load(job.config.read_text())
    config["trainer"].update(trainer)
    job.config.write_text(yaml.safe_dump(config))
    return job


def _complete_step(job) -> int | None:
    found = latest_complete(job.trees["algo-2"] / "checkpoints")
    return json.loads((Path(found) / "meta.json").read_text())["step"] if found else None


def _steps_logged(job) -> int:
    return sum(line.startswith("step=") for line in job.log("algo-2").splitlines())


def _next_job(job, **trainer) -> None:
    """The job's next run, as SageMaker starts one: the same checkpoints, new hosts (the toolkit copies
    its source dir, the config in it, to an empty /opt/ml/code), these trainer settings."""
    config = yaml.safe_load(job.config.read_text())
    config["trainer"].update(trainer)
    job.config.write_text(yaml.safe_dump(config))
    shutil.rmtree(job.root / "sourcedir", ignore_errors=True)
    for tree in job.trees.values():
        shutil.rmtree(tree / "code")
        (tree / "code").mkdir()
    job.procs.clear()
    job.exited.clear()


@pytest.mark.ray
def test_a_stop_under_bash_is_dropped_under_tini_kills_every_launcher_and_each_next_job_resumes_its_last_checkpoint(
    tmp_path,
):
    """Two jobs on the same checkpoints, each ended by a SageMaker stop (SIGTERM to both PID 1s), as
    each kind of PID 1 meets it. (Two jobs, not three: the first's next job is the second.)

    1. bash running `train` as a child (as AWS's framework images' entry script does) as PID 1 of both
       hosts, `checkpoint_every_s` left to its default. Each host says at start that a stop will be
       dropped and that it checkpoints every 300 s for that. SIGTERM to both PID 1s changes nothing:
       3 s later every launcher still runs and the head has logged more steps. SageMaker's SIGKILL
       then ends both namespaces; the newest complete checkpoint is a periodic one (every 4 steps).
    2. The next job, on new hosts, under tini (the real one where installed) and checkpointing on a
       timer (every 3 s, set in the config): it resumes from that periodic checkpoint and trains on
       from it. Each host says at start that a stop will kill it. SIGTERM to both PID 1s: `train` and
       tini exit 143, the kernel kills each launcher at once (no stop line, no checkpoint of the
       stop), and the newest complete checkpoint, where the next job resumes (`latest_complete`,
       which the next run calls), is the last timed one before the stop."""
    pytest.importorskip("sagemaker_training")
    job = _two_host_job(tmp_path, checkpoint_interval=4)
    try:
        entry = ["bash", "-m", "-c", '"$@"; exit $?', "entry.sh"]
        unshares = {h: job.start_under_toolkit(h, pid1=entry) for h in job.trees}
        job.wait_for_text("algo-2", "step=6 ", 300)
        launchers = launcher_pids(unshares)
        assert len(launchers) == 2
        for host in job.trees:
            assert "PID 1 is bash" in job.log(host) and "the kernel drops a stop's signal" in job.log(host)
            assert "checkpointing every 300 s instead (trainer.checkpoint_every_s default under this PID 1)" in job.log(
                host
            )
        for unshare in unshares.values():
            os.kill(pid1_of(unshare), signal.SIGTERM)
        steps = _steps_logged(job)
        time.sleep(3)
        assert all(alive(p) for p in launchers.values()) and all(u.poll() is None for u in unshares.values())
        assert _steps_logged(job) > steps and "on request" not in job.log("algo-2")
        for unshare in unshares.values():  # SageMaker's SIGKILL, 120 s after its SIGTERM
            os.kill(pid1_of(unshare), signal.SIGKILL)
        assert all(u.wait(10) != 0 for u in unshares.values())
        assert not any(alive(p) for p in launchers.values())
        resumes_at = _complete_step(job)
        assert resumes_at is not None and resumes_at % 4 == 0 and resumes_at >= 4

        # 2. The next job resumes there, under tini, every checkpoint from now on a timed one.
        _next_job(job, checkpoint_every_s=3, checkpoint_interval=0)
        unshares = {h: job.start_under_toolkit(h, pid1=TINI) for h in job.trees}
        job.wait_for_text("algo-2", f"step={resumes_at + 4} ", 300)
        head = job.log("algo-2")
        assert any("resumed from" in line and f"at step {resumes_at}, epoch" in line for line in head.splitlines()), (
            head[-3000:]
        )
        deadline = time.monotonic() + 60
        while (_complete_step(job) or 0) <= resumes_at:  # the first timed checkpoint of this job
            assert time.monotonic() < deadline, job.log("algo-2")[-3000:]
            time.sleep(0.2)
        launchers = launcher_pids(unshares)
        assert len(launchers) == 2
        for host in job.trees:
            assert "PID 1 is tini" in job.log(host) and "kills sm-launch with it" in job.log(host)
            assert "checkpointing every 3 s instead (trainer.checkpoint_every_s)" in job.log(host)
        before = _complete_step(job)
        signalled = time.time()
        for unshare in unshares.values():
            os.kill(pid1_of(unshare), signal.SIGTERM)
        assert {h: u.wait(10) for h, u in unshares.items()} == {h: 143 for h in job.trees}  # tini: train's status
        assert not any(alive(p) for p in launchers.values())  # gone with their namespaces, at once
        head = job.log("algo-2")
        assert "on request" not in head and "checkpoint written" not in head
        after = _complete_step(job)
        assert after is not None and after >= before > resumes_at  # where the next job resumes (`latest_complete`)
        written = [m.stat().st_mtime for m in (job.trees["algo-2"] / "checkpoints").rglob("meta.json")]
        assert written and max(written) < signalled  # every checkpoint a timed one from before the stop
        assert not (job.trees["algo-2"] / "output" / "data" / "report.json").exists()
    finally:
        job.cleanup()
