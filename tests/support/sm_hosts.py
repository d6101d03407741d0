"""A SageMaker host as a CreateTrainingJob request would give it, for tests that run the shipped
entry for real: the /opt/ml tree, the job's environment, and the image's training toolkit."""

import json
import os
import subprocess
import sys
from pathlib import Path

from smlaunch.cluster.host_tree import write_host_tree


def fake_host(root: Path, request: dict, host: str) -> tuple[Path, str]:
    """The /opt/ml tree SageMaker would give `host` for this request (hosts numbered group by group)."""
    groups, n = [], 0
    for g in request["ResourceConfig"]["InstanceGroups"]:
        hosts = [f"algo-{n + i + 1}" for i in range(g["InstanceCount"])]
        n += len(hosts)
        groups.append(
            {"instance_group_name": g["InstanceGroupName"], "instance_type": g["InstanceType"], "hosts": hosts}
        )
    group = next(g["instance_group_name"] for g in groups if host in g["hosts"])
    # a channel without InstanceGroupNames (a file system has none) reaches every group
    default_mode = request.get("AlgorithmSpecification", {}).get("TrainingInputMode", "File")
    channels = {
        c["ChannelName"]: c.get("InputMode", default_mode)
        for c in request["InputDataConfig"]
        if group in c["DataSource"].get("S3DataSource", {}).get("InstanceGroupNames", [group])
    }
    tree = write_host_tree(root / host / "opt" / "ml", host, groups, channels)
    (tree / "input" / "config" / "hyperparameters.json").write_text(json.dumps(request.get("HyperParameters", {})))
    return tree, group


def host_env(request: dict, tree: Path, **extra: str) -> dict:
    """The job's Environment on a host; PYTHONPATH dropped so only the shipped code can be imported."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(
        request["Environment"],
        SAGEMAKER_BASE_DIR=str(tree),
        PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        **extra,
    )
    return env


def run_toolkit(aws, request: dict, tree: Path) -> subprocess.CompletedProcess:
    """What a PyTorch training image does with `train`: the toolkit reads /opt/ml, downloads the
    submit directory from S3, exports SM_* and runs sagemaker_program with the hyperparameters as arguments."""
    toolkit = (
        "from sagemaker_training import entry_point, environment\n"
        "env = environment.Environment()\n"
        "entry_point.run(uri=env.module_dir, user_entry_point=env.user_entry_point, "
        "args=env.to_cmd_args(), env_vars=env.to_env_vars())\n"
    )
    env = host_env(
        request,
        tree,
        S3_ENDPOINT_URL=aws.endpoint,
        AWS_REGION="us-east-1",
        SM_STUDIO_LOCAL_MODE="true",
        TRAINING_JOB_NAME=request["TrainingJobName"],
    )
    ran = subprocess.run(
        [sys.executable, "-c", toolkit], env=env, capture_output=True, text=True, timeout=120, cwd=tree.parent
    )
    assert ran.returncode == 0, ran.stdout[-2000:] + ran.stderr[-2000:]
    return ran
