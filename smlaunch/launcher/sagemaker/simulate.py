"""`sm-launch simulate CONFIG`: a config's SageMaker path, every host of it, on this machine.

Where `sm-launch CONFIG` simulates every host inside one process (one Ray node each), this runs
what a training job runs: one `/opt/ml` tree and one real `sm-launch` process per host, as
SageMaker starts one container per host. Each host process reads its own tree
(`SAGEMAKER_BASE_DIR`), resolves the head by name (an /etc/hosts-style file,
`SMLAUNCH_HOSTS_FILE`, maps every `algo-N` to 127.0.0.1), starts its own `ray start` and joins
with the job's shared token. The trees are filled as a local run fills them (the same channels,
Pipe agents and local S3 server: `launcher.local.run.local_data`). So the join, the job state,
the head's outcome and every host's exit can be tried before a job is billed; the multi-host
tests and `bench/bringup.py` run it too (`SimulatedHosts`).
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from smlaunch.cluster.environment import SIMULATED_HOST_ENV
from smlaunch.cluster.rendezvous import free_port

log = logging.getLogger("smlaunch")


class SimulatedHosts:
    """One `sm-launch` process per host tree. `trees`: host -> its `/opt/ml`; `config`: the job's
    config as a mapping, whose `cluster.port` is set to a free port here. Host logs go to
    `root/<host>.log`."""

    def __init__(self, root: Path, trees: dict[str, Path], config: dict):
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.trees = {host: Path(tree) for host, tree in trees.items()}
        self.port = free_port()
        self.hosts_file = self.root / "hosts.txt"
        self.hosts_file.write_text("".join(f"127.0.0.1 {h}\n" for h in self.trees))
        config = {**config, "cluster": {**config["cluster"], "port": self.port}}
        self.config = self.root / "job.yaml"
        self.config.write_text(yaml.safe_dump(config))
        self.token = secrets.token_hex(32)
        # Each host's Ray temp dir goes here (short: Ray's socket paths must fit in 107 bytes).
        self.tmp = Path(tempfile.mkdtemp(prefix="smj", dir="/tmp"))
        self.procs: dict[str, subprocess.Popen] = {}
        self.exited: dict[str, float] = {}

    def start(
        self, host: str, command: str = "run", argv: list[str] | None = None, **overrides: str
    ) -> subprocess.Popen:
        """Start `host`'s `sm-launch COMMAND` (or `argv`) with its own tree; `overrides` are
        environment variables. The host is no container: this machine's PID 1 is not its, so it
        reads none (`SMLAUNCH_SIMULATED_HOST`; a host started in a PID namespace of its own sets it
        empty)."""
        env = {
            **os.environ,
            "SAGEMAKER_BASE_DIR": str(self.trees[host]),
            "SMLAUNCH_HOSTS_FILE": str(self.hosts_file),
            "SMLAUNCH_RAY_TOKEN": self.token,
            "TRAINING_JOB_NAME": "simulated-job",
            "PYTHONUNBUFFERED": "1",
            "TMPDIR": str(self.tmp),
            SIMULATED_HOST_ENV: "1",
            **overrides,
        }
        env.pop("RAY_ADDRESS", None)
        (self.root / f"{host}.log").write_text("")
        # appended to, as a container's output stream is: a host's processes write it through
        # descriptors of their own (sm-launch, and after the toolkit exits, PID 1's stdout)
        with open(self.root / f"{host}.log", "a") as out:
            self.procs[host] = subprocess.Popen(
                argv or [sys.executable, "-m", "smlaunch.launcher.cli", command, str(self.config)],
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
            )
        return self.procs[host]

    def log(self, host: str) -> str:
        return (self.root / f"{host}.log").read_text()

    def wait_for_text(self, host: str, text: str, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while text not in self.log(host):
            if time.monotonic() >= deadline:
                raise TimeoutError(f"{host} never printed {text!r}:\n{self.log(host)[-3000:]}")
            if self.procs[host].poll() is not None:
                raise RuntimeError(f"{host} exited early:\n{self.log(host)[-3000:]}")
            time.sleep(0.2)

    def wait(self, timeout_s: float) -> dict[str, int | None]:
        """Exit status per host (None: still running at the deadline); records when each exited."""
        deadline = time.monotonic() + timeout_s
        while len(self.exited) < len(self.procs) and time.monotonic() < deadline:
            for host, proc in self.procs.items():
                if host not in self.exited and proc.poll() is not None:
                    self.exited[host] = time.monotonic()
            time.sleep(0.1)
        return {h: p.poll() for h, p in self.procs.items()}

    def send_signal(self, signum: int = signal.SIGTERM) -> None:
        """What StopTrainingJob does: the signal to every host's process still running."""
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signum)

    def failure(self, host: str) -> str | None:
        path = self.trees[host] / "output" / "failure"
        return path.read_text() if path.exists() else None

    def cleanup(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, 9)
                except ProcessLookupError:
                    pass
                proc.wait(10)
        shutil.rmtree(self.tmp, ignore_errors=True)


KILL_AFTER_S = 150.0
"""After a stop was passed on, how long the hosts get before they are killed: SageMaker's 120 s
between SIGTERM and SIGKILL, plus the hosts' own start-up."""


def simulate(cfg, plan, command: str, stop, hyperparameters: dict[str, str] | None = None) -> int:
    """Every host of `plan` as its own `sm-launch COMMAND` process on this machine; returns the
    job's status (0 when every host exited 0, else the first host's non-zero status). A stop
    (SIGTERM, Ctrl-C) is passed to every host, as StopTrainingJob sends it to every container.
    `hyperparameters` go to every host's hyperparameters.json as written (a job's `HyperParameters`
    map, strings to strings), where each host's sm-launch reads them."""
    from smlaunch.config.shown import shown_config
    from smlaunch.launcher.local.run import local_data
    from smlaunch.text import plural

    with local_data(cfg, plan):
        hosts = SimulatedHosts(Path(plan.run_dir), {h.name: Path(h.opt_ml) for h in plan.hosts}, shown_config(cfg))
        for tree in hosts.trees.values():
            (tree / "input" / "config" / "hyperparameters.json").write_text(json.dumps(hyperparameters or {}))
        try:
            for host in plan.hosts:
                hosts.start(host.name, command)
            log.info(
                f"simulate: {plural(len(plan.hosts), 'host process', 'host processes')} started "
                f"(head {plan.head}); logs in {plan.run_dir}/<host>.log"
            )
            stopped_at = None
            while None in hosts.wait(1.0).values():
                if stop.is_set() and stopped_at is None:
                    stopped_at = time.monotonic()
                    hosts.send_signal(signal.SIGTERM)
                if stopped_at is not None and time.monotonic() - stopped_at > KILL_AFTER_S:
                    log.error(f"hosts still running {KILL_AFTER_S:g} s after the stop; killing them")
                    break
        finally:
            hosts.cleanup()
    for host in plan.hosts:
        code = hosts.procs[host.name].returncode
        tail = [line for line in hosts.log(host.name).splitlines() if line.strip()][-1:]
        log.info(f"{host.name}: exit {code}" + (f": {tail[0]}" if tail else ""))
    bad = [hosts.procs[h.name].returncode for h in plan.hosts if hosts.procs[h.name].returncode != 0]
    return bad[0] if bad else 0
