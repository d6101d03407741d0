"""The multi-host tests' SageMaker job: `launcher.sagemaker.simulate.SimulatedHosts` over trees
laid out from a resourceconfig layout (hosts as SageMaker may list them), with data hard-linked
in, and a host that can start under the real `sagemaker-training` toolkit."""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import yaml

from smlaunch.cluster.host_tree import simulate_job
from smlaunch.launcher.sagemaker.simulate import SimulatedHosts

ROOT = Path(__file__).resolve().parents[2]


class SimulatedJob(SimulatedHosts):
    """`layout`: resourceconfig `instance_groups` (hosts as SageMaker may list them, unsorted);
    `routes`: channel -> the groups that receive it (File mode); `data`: channel -> a local folder
    whose files every receiving host gets (hard links); `config`: the job's config as a mapping."""

    def __init__(
        self, root: Path, layout: list[dict], routes: dict[str, list[str]], data: dict[str, Path], config: dict
    ):
        trees = simulate_job(Path(root) / "hosts", layout, routes)
        receives = {
            channel: {h for g in layout if g["instance_group_name"] in groups for h in g["hosts"]}
            for channel, groups in routes.items()
        }
        for host, tree in trees.items():
            for channel, folder in data.items():
                if host not in receives.get(channel, ()):
                    continue
                target = tree / "input" / "data" / channel
                for path in sorted(Path(folder).rglob("*")):
                    if path.is_file() and not path.name.startswith("."):
                        (target / path.relative_to(folder)).parent.mkdir(parents=True, exist_ok=True)
                        os.link(path, target / path.relative_to(folder))
        super().__init__(root, trees, config)

    def start_under_toolkit(
        self, host: str, command: str = "run", pid1: list[str] | None = None, capture_error: bool = False
    ):
        """Start `host` as the toolkit recipe does: the `sagemaker-training` toolkit's real `train`
        entry reads the host's hyperparameters, copies the source dir (this checkout's package and
        the job's config, as a submitted job's tarball holds them) to /opt/ml/code and runs the
        entry script from it, which execs `sm-launch`. Needs `sagemaker-training` installed.

        `pid1`: run the host as a container does, in a PID namespace of its own whose PID 1 is this
        command with `train` as its argument (`unshare -pf --mount-proc`; the process started here
        is `unshare`, and `pid1_of` finds the namespace's PID 1). `capture_error`: `train` runs the
        entry through a framework module as the PyTorch images do (`support.pytorch_framework`),
        which pipes the entry's stdout and stderr to the toolkit."""
        source = self.root / "sourcedir"
        if not source.exists():
            package = ROOT / "smlaunch"
            shutil.copytree(package, source / package.name, ignore=shutil.ignore_patterns("__pycache__"))
            shutil.copy(ROOT / "pyproject.toml", source)
            shutil.copy(self.config, source / "job.yaml")
        hyperparameters = {
            "config": "job.yaml",
            "sagemaker_program": "smlaunch/launcher/sm_entry.py",
            "sagemaker_submit_directory": str(source),
            "sagemaker_region": "us-east-1",
        }
        (self.trees[host] / "input" / "config" / "hyperparameters.json").write_text(
            json.dumps({k: json.dumps(v) for k, v in hyperparameters.items()})
        )
        train = [str(Path(sys.executable).with_name("train"))]
        argv = ["unshare", "-pf", "--mount-proc", *pid1, *train] if pid1 is not None else train
        container = {"SMLAUNCH_SIMULATED_HOST": ""} if pid1 is not None else {}  # its PID 1 is what a stop meets
        framework = (
            {
                "SAGEMAKER_TRAINING_MODULE": "pytorch_framework:main",
                "PYTHONPATH": os.pathsep.join(
                    p for p in (str(ROOT / "tests" / "support"), os.environ.get("PYTHONPATH")) if p
                ),
            }
            if capture_error
            else {}
        )
        # SM_STUDIO_LOCAL_MODE: the toolkit skips waiting for DNS to resolve algo-N (here a hosts file does)
        return self.start(
            host,
            command,
            argv=argv,
            SMLAUNCH_PIP_INSTALL="0",
            SMLAUNCH_COMMAND=command,
            AWS_REGION="us-east-1",
            SM_STUDIO_LOCAL_MODE="true",
            **framework,
            **container,
        )


DIGITS_LAYOUT = [
    {"instance_group_name": "data_group", "instance_type": "ml.c5.xlarge", "hosts": ["algo-1"]},
    {"instance_group_name": "train_group", "instance_type": "ml.g5.xlarge", "hosts": ["algo-3", "algo-2"]},
]
"""algo-1 is the CPU host and the GPU group's hosts are listed unsorted, as SageMaker may write them."""


def digits_job(
    root: Path,
    config_file: Path,
    *,
    steps: int | None = None,
    join_timeout_s: float = 120,
    log_every: int | None = None,
    layout: list[dict] = DIGITS_LAYOUT,
) -> SimulatedJob:
    """`config_file`'s job on `layout`'s groups (ml.c5.xlarge data_group, 2 x ml.g5.xlarge
    train_group by default), both channels the builtin digits, delivered to data_group."""
    from smlaunch.pipelines.builtin.digits import prepare_digits

    cfg = yaml.safe_load(Path(config_file).read_text())
    cfg["cluster"] = {
        "instance_groups": [
            {"name": g["instance_group_name"], "instance_type": g["instance_type"], "instance_count": len(g["hosts"])}
            for g in layout
        ],
        "join_timeout_s": join_timeout_s,
        "object_store_mb": 160,
    }
    if steps is not None:
        cfg["trainer"] = {**cfg["trainer"], "steps": steps}
    if log_every is not None:
        cfg["trainer"] = {**cfg["trainer"], "log_every": log_every}
    data_group = layout[0]["instance_group_name"]
    cfg["channels"] = {
        c: {"source": f"builtin:digits/{c}", "instance_groups": [data_group]} for c in ("train", "validation")
    }
    digits = prepare_digits()
    return SimulatedJob(
        root,
        layout,
        {c: [data_group] for c in ("train", "validation")},
        {c: digits / c for c in ("train", "validation")},
        cfg,
    )
