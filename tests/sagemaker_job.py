"""A fake heterogeneous SageMaker job on this machine: one `/opt/ml` tree and one real `sm-launch`
process per host, names mapped to 127.0.0.1 through a hosts file. Used by the multi-host tests."""

from __future__ import annotations

import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from smlaunch.cluster.host_tree import simulate_job
from smlaunch.pipelines.channels import list_record_files
from smlaunch.pipelines.digits import prepare_digits

ROOT = Path(__file__).resolve().parents[1]
# algo-1 is the CPU host and the GPU group's hosts are listed unsorted, as SageMaker may write them.
LAYOUT = [
    {"instance_group_name": "data_group", "instance_type": "ml.c5.xlarge", "hosts": ["algo-1"]},
    {"instance_group_name": "train_group", "instance_type": "ml.g5.xlarge", "hosts": ["algo-3", "algo-2"]},
]


HOSTS = ("algo-1", "algo-2", "algo-3")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class FakeJob:
    def __init__(self, root: Path, steps: int = 20, join_timeout_s: float = 120, layout=LAYOUT):
        self.root = root
        self.port = free_port()
        self.trees = simulate_job(root / "hosts", layout, {"train": ["data_group"], "validation": ["data_group"]})
        digits = prepare_digits()
        for host, tree in self.trees.items():
            for channel in ("train", "validation"):
                if (tree / "input" / "data").joinpath(channel).exists() or host in layout[0]["hosts"]:
                    target = tree / "input" / "data" / channel
                    for rel, _ in list_record_files(digits / channel, channel):
                        (target / rel).parent.mkdir(parents=True, exist_ok=True)
                        os.link(digits / channel / rel, target / rel)
        self.hosts_file = root / "hosts.txt"
        self.hosts_file.write_text("".join(f"127.0.0.1 {h}\n" for h in self.trees))
        cfg = yaml.safe_load((ROOT / "configs" / "tiny.yaml").read_text())
        cfg["cluster"] = {"instance_groups": [{"name": "data_group", "instance_type": "ml.c5.xlarge"},
                                              {"name": "train_group", "instance_type": "ml.g5.xlarge",
                                               "instance_count": 2}],
                          "port": self.port, "join_timeout_s": join_timeout_s, "object_store_mb": 160}
        cfg["trainer"]["steps"] = steps
        cfg["trainer"]["log_every"] = 2
        cfg["channels"] = {c: {"source": f"builtin:digits/{c}", "instance_groups": ["data_group"]}
                           for c in ("train", "validation")}
        self.config = root / "job.yaml"
        self.config.write_text(yaml.safe_dump(cfg))
        self.token = secrets.token_hex(32)
        # Each host's Ray temp dir goes here (short: Ray's socket paths must fit in 107 bytes).
        self.tmp = Path(tempfile.mkdtemp(prefix="smj", dir="/tmp"))
        self.procs: dict[str, subprocess.Popen] = {}
        self.exited: dict[str, float] = {}

    def start(self, host: str, command: str = "run", **overrides: str) -> subprocess.Popen:
        env = {**os.environ, "SAGEMAKER_BASE_DIR": str(self.trees[host]), "SMLAUNCH_HOSTS_FILE": str(self.hosts_file),
               "SMLAUNCH_RAY_TOKEN": self.token, "TRAINING_JOB_NAME": "fake-job", "PYTHONUNBUFFERED": "1",
               "TMPDIR": str(self.tmp), **overrides}
        env.pop("RAY_ADDRESS", None)
        log = open(self.root / f"{host}.log", "w")
        self.procs[host] = subprocess.Popen(
            [sys.executable, "-m", "smlaunch.launcher.cli", command, str(self.config)],
            stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        return self.procs[host]

    def log(self, host: str) -> str:
        return (self.root / f"{host}.log").read_text()

    def wait_for_text(self, host: str, text: str, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while text not in self.log(host):
            assert time.monotonic() < deadline, f"{host} never printed {text!r}:\n{self.log(host)[-3000:]}"
            assert self.procs[host].poll() is None, f"{host} exited early:\n{self.log(host)[-3000:]}"
            time.sleep(0.2)

    def wait(self, timeout_s: float) -> dict[str, int]:
        """Exit status per host; records when each exited."""
        deadline = time.monotonic() + timeout_s
        while len(self.exited) < len(self.procs) and time.monotonic() < deadline:
            for host, proc in self.procs.items():
                if host not in self.exited and proc.poll() is not None:
                    self.exited[host] = time.monotonic()
            time.sleep(0.1)
        return {h: p.poll() for h, p in self.procs.items()}

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
