"""Our reader against the sagemaker-training toolkit's `Environment` on the same /opt/ml trees.

The toolkit writes files and variables when imported, so it runs in a subprocess with
SAGEMAKER_BASE_DIR pointing at the tree under test."""

import json
import os
import shutil
import subprocess
import sys

import pytest

from smlaunch.cluster.host_tree import write_host_tree
from smlaunch.cluster.sagemaker_env import read_sagemaker_environment
from smlaunch.errors import ConfigError

TOOLKIT = """
import json, os
from sagemaker_training import environment
env = environment.Environment()
print(json.dumps({
    "current_host": env.current_host, "hosts": env.hosts, "current_group": env.current_instance_group,
    "current_group_hosts": env.current_instance_group_hosts, "groups": env.instance_groups_dict,
    "is_hetero": env.is_hetero, "network_interface_name": env.network_interface_name,
    "channels": {c: s["TrainingInputMode"] for c, s in env.input_data_config.items()},
    "channel_dirs": env.channel_input_dirs, "hyperparameters": env.hyperparameters,
    "current_instance_type": env.current_instance_type,
    "sm_vars": {k: v for k, v in env.to_env_vars().items()}}))
"""

# Dev guide "Train Using a Heterogeneous Cluster": algo-N not grouped by group, group hosts unsorted.
DEV_GUIDE = [
    {"instance_group_name": "instance_group_1", "instance_type": "ml.c5.18xlarge", "hosts": ["algo-2"]},
    {"instance_group_name": "instance_group_2", "instance_type": "ml.p3dn.24xlarge", "hosts": ["algo-3", "algo-1"]},
]
HOMOGENEOUS = [
    {"instance_group_name": "homogeneousCluster", "instance_type": "ml.g5.xlarge", "hosts": ["algo-1", "algo-2"]}
]


def toolkit_view(base, extra_env=None) -> dict:
    env = {**os.environ, "SAGEMAKER_BASE_DIR": str(base), **(extra_env or {})}
    out = subprocess.run([sys.executable, "-c", TOOLKIT], env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def ours(base, extra=None) -> dict:
    sm = read_sagemaker_environment({"SAGEMAKER_BASE_DIR": str(base), **(extra or {})})
    return {
        "current_host": sm.current_host,
        "hosts": list(sm.hosts),
        "current_group": sm.current_group,
        "current_group_hosts": list(sm.current_group_hosts),
        "groups": {
            n: {"instance_group_name": g.name, "instance_type": g.instance_type, "hosts": list(g.hosts)}
            for n, g in sm.groups.items()
        },
        "is_hetero": sm.is_hetero,
        "network_interface_name": sm.network_interface_name,
        "channels": sm.channels,
        "channel_dirs": {c: str(sm.path("input", "data", c)) for c in sm.channels},
        "hyperparameters": sm.hyperparameters,
        "current_instance_type": sm.current_instance_type,
    }


def compare(base, extra=None):
    theirs = toolkit_view(base)
    theirs.pop("sm_vars")
    assert ours(base, extra) == theirs


@pytest.mark.parametrize("layout,host", [(DEV_GUIDE, "algo-1"), (DEV_GUIDE, "algo-2"), (HOMOGENEOUS, "algo-2")])
def test_agrees_with_the_toolkit_field_by_field(tmp_path, layout, host):
    base = write_host_tree(
        tmp_path / "opt/ml",
        host,
        layout,
        {"train": "File", "stream": "Pipe"},
        interface="eth1",
        hyperparameters={"lr": 0.1, "name": "x", "sagemaker_program": "t.py"},
    )
    compare(base)
    view = ours(base)
    assert view["is_hetero"] == (layout is DEV_GUIDE)
    assert view["hyperparameters"] == {"lr": 0.1, "name": "x"}


def test_agrees_without_instance_groups_and_with_a_raw_hyperparameter(tmp_path):
    """SDK local mode and old jobs: no `instance_groups`, no group key, values that are not JSON."""
    base = tmp_path / "opt/ml"
    (base / "input/config").mkdir(parents=True)
    (base / "input/config/resourceconfig.json").write_text(
        json.dumps({"current_host": "algo-1", "hosts": ["algo-1", "algo-2"]})
    )
    (base / "input/config/inputdataconfig.json").write_text(json.dumps({"train": {"TrainingInputMode": "FastFile"}}))
    (base / "input/config/hyperparameters.json").write_text(json.dumps({"mode": "plain text", "n": "3"}))
    compare(base)
    sm = read_sagemaker_environment({"SAGEMAKER_BASE_DIR": str(base)})
    assert sm.current_group == "homogeneousCluster" and sm.groups == {} and sm.network_interface_name == "eth0"
    assert sm.hyperparameters == {"mode": "plain text", "n": 3}


def test_sm_variables_give_the_same_answer_with_and_without_the_files(tmp_path):
    base = write_host_tree(tmp_path / "opt/ml", "algo-3", DEV_GUIDE, {"train": "File"}, hyperparameters={"lr": 0.1})
    sm_vars = toolkit_view(base)["sm_vars"]
    assert "SM_RESOURCE_CONFIG" in sm_vars and "SM_CURRENT_HOST" in sm_vars
    with_files = ours(base, sm_vars)
    shutil.rmtree(base / "input/config")  # a process started with the toolkit's variables only
    assert ours(base, sm_vars) == with_files
    assert with_files["current_host"] == "algo-3" and with_files["current_group"] == "instance_group_2"


def test_missing_and_malformed_files_are_one_line_errors(tmp_path):
    with pytest.raises(ConfigError, match="resourceconfig.json: not found and SM_RESOURCE_CONFIG is not set"):
        read_sagemaker_environment({"SAGEMAKER_BASE_DIR": str(tmp_path)})
    (tmp_path / "input/config").mkdir(parents=True)
    (tmp_path / "input/config/resourceconfig.json").write_text('{"current_host": "algo-1",')
    with pytest.raises(ConfigError, match=r"resourceconfig.json: not valid JSON \(.* line 1"):
        read_sagemaker_environment({"SAGEMAKER_BASE_DIR": str(tmp_path)})
    (tmp_path / "input/config/resourceconfig.json").write_text('{"current_host": "algo-1"}')
    with pytest.raises(ConfigError, match="missing key 'hosts'"):
        read_sagemaker_environment({"SAGEMAKER_BASE_DIR": str(tmp_path)})
