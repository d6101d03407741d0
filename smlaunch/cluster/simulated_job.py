"""A multi-host SageMaker job simulated on one machine: one `/opt/ml` tree and one real `sm-launch`
process per host, as SageMaker starts one container per host.

Where `sm-launch CONFIG` simulates every host inside one process (one Ray node each), this runs
the SageMaker path itself: each host process reads its own tree (`SAGEMAKER_BASE_DIR`), resolves
the head by name (an /etc/hosts-style file, `SMLAUNCH_HOSTS_FILE`, maps every `algo-N` to
127.0.0.1), starts its own `ray start` and joins with the job's shared token. The multi-host tests
and `bench/bringup.py` use it; it is also how to try a config's SageMaker path on a laptop.
"""

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


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class SimulatedJob:
    """`layout`: resourceconfig `instance_groups` (hosts as SageMaker may list them, unsorted);
    `routes`: channel -> the groups that receive it (File mode); `data`: channel -> a local folder
    whose files every receiving host gets (hard links); `config`: the job's config as a mapping,
    whose `cluster.port` is set to a free port here."""

    def __init__(self, root: Path, layout: list[dict], routes: dict[str, list[str]], data: dict[str, Path],
                 config: dict):
        self.root = Path(root)
        self.port = free_port()
        self.trees = simulate_job(self.root / "hosts", layout, routes)
        receives = {channel: {h for g in layout if g["instance_group_name"] in groups for h in g["hosts"]}
                    for channel, groups in routes.items()}
        for host, tree in self.trees.items():
            for channel, folder in data.items():
                if host not in receives.get(channel, ()):
                    continue
                target = tree / "input" / "data" / channel
                for path in sorted(Path(folder).rglob("*")):
                    if path.is_file() and not path.name.startswith("."):
                        (target / path.relative_to(folder)).parent.mkdir(parents=True, exist_ok=True)
                        os.link(path, target / path.relative_to(folder))
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

    def start(self, host: str, command: str = "run", argv: list[str] | None = None,
              **overrides: str) -> subprocess.Popen:
        """Start `host`'s `sm-launch COMMAND` (or `argv`) with its own tree; `overrides` are
        environment variables."""
        env = {**os.environ, "SAGEMAKER_BASE_DIR": str(self.trees[host]), "SMLAUNCH_HOSTS_FILE": str(self.hosts_file),
               "SMLAUNCH_RAY_TOKEN": self.token, "TRAINING_JOB_NAME": "simulated-job", "PYTHONUNBUFFERED": "1",
               "TMPDIR": str(self.tmp), **overrides}
        env.pop("RAY_ADDRESS", None)
        log = open(self.root / f"{host}.log", "w")
        self.procs[host] = subprocess.Popen(
            argv or [sys.executable, "-m", "smlaunch.launcher.cli", command, str(self.config)],
            stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        return self.procs[host]

    def start_under_toolkit(self, host: str, command: str = "run") -> subprocess.Popen:
        """Start `host` as the toolkit recipe does: the `sagemaker-training` toolkit's real `train`
        entry reads the host's hyperparameters, copies the source dir (this checkout's package and
        the job's config, as a submitted job's tarball holds them) to /opt/ml/code and runs the
        entry script from it, which execs `sm-launch`. Needs `sagemaker-training` installed."""
        import json

        source = self.root / "sourcedir"
        if not source.exists():
            package = Path(__file__).resolve().parents[1]
            shutil.copytree(package, source / package.name, ignore=shutil.ignore_patterns("__pycache__"))
            shutil.copy(package.parent / "pyproject.toml", source)
            shutil.copy(self.config, source / "job.yaml")
        hyperparameters = {"config": "job.yaml", "sagemaker_program": "smlaunch/launcher/sm_entry.py",
                           "sagemaker_submit_directory": str(source), "sagemaker_region": "us-east-1"}
        (self.trees[host] / "input" / "config" / "hyperparameters.json").write_text(
            json.dumps({k: json.dumps(v) for k, v in hyperparameters.items()}))
        train = Path(sys.executable).with_name("train")
        # SM_STUDIO_LOCAL_MODE: the toolkit skips waiting for DNS to resolve algo-N (here a hosts file does)
        return self.start(host, command, argv=[str(train)], SMLAUNCH_PIP_INSTALL="0", SMLAUNCH_COMMAND=command,
                          AWS_REGION="us-east-1", SM_STUDIO_LOCAL_MODE="true")

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


DIGITS_LAYOUT = [
    {"instance_group_name": "data_group", "instance_type": "ml.c5.xlarge", "hosts": ["algo-1"]},
    {"instance_group_name": "train_group", "instance_type": "ml.g5.xlarge", "hosts": ["algo-3", "algo-2"]},
]
"""algo-1 is the CPU host and the GPU group's hosts are listed unsorted, as SageMaker may write them."""


def digits_job(root: Path, config_file: Path, *, steps: int | None = None, join_timeout_s: float = 120,
               log_every: int | None = None, layout: list[dict] = DIGITS_LAYOUT) -> SimulatedJob:
    """`config_file`'s job on `layout`'s groups (ml.c5.xlarge data_group, 2 x ml.g5.xlarge
    train_group by default), both channels the builtin digits, delivered to data_group."""
    from smlaunch.pipelines.builtin.digits import prepare_digits

    cfg = yaml.safe_load(Path(config_file).read_text())
    cfg["cluster"] = {"instance_groups": [{"name": g["instance_group_name"], "instance_type": g["instance_type"],
                                           "instance_count": len(g["hosts"])} for g in layout],
                      "join_timeout_s": join_timeout_s, "object_store_mb": 160}
    if steps is not None:
        cfg["trainer"] = {**cfg["trainer"], "steps": steps}
    if log_every is not None:
        cfg["trainer"] = {**cfg["trainer"], "log_every": log_every}
    data_group = layout[0]["instance_group_name"]
    cfg["channels"] = {c: {"source": f"builtin:digits/{c}", "instance_groups": [data_group]}
                       for c in ("train", "validation")}
    digits = prepare_digits()
    return SimulatedJob(root, layout, {c: [data_group] for c in ("train", "validation")},
                        {c: digits / c for c in ("train", "validation")}, cfg)
