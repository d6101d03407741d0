"""The shared Ray token of a SageMaker job: where it comes from, and refusing to run without one."""

import pytest

from smlaunch.cluster.sagemaker_env import SageMakerEnvironment
from smlaunch.errors import UserError
from smlaunch.launcher.sagemaker_run import ray_environment


def env(*hosts):
    return SageMakerEnvironment(base_dir="/opt/ml", current_host=hosts[0], hosts=hosts, current_instance_type="x",
                                current_group="g", current_group_hosts=hosts, groups={},
                                network_interface_name="eth0", channels={})


def test_multi_host_job_needs_the_job_token_and_uses_it():
    with pytest.raises(UserError, match="multi-host job without a Ray token: set SMLAUNCH_RAY_TOKEN"):
        ray_environment(env("algo-1", "algo-2"), {})
    token = "ab" * 32
    variables = ray_environment(env("algo-1", "algo-2"), {"SMLAUNCH_RAY_TOKEN": token})
    assert variables["RAY_AUTH_MODE"] == "token" and variables["RAY_AUTH_TOKEN"] == token
    assert ray_environment(env("algo-1", "algo-2"), {"RAY_AUTH_TOKEN": token})["RAY_AUTH_TOKEN"] == token
    with pytest.raises(UserError, match="at least 32 characters"):
        ray_environment(env("algo-1", "algo-2"), {"SMLAUNCH_RAY_TOKEN": "short"})


def test_single_host_job_makes_its_own_token():
    first = ray_environment(env("algo-1"), {})["RAY_AUTH_TOKEN"]
    assert len(first) == 64 and first != ray_environment(env("algo-1"), {})["RAY_AUTH_TOKEN"]
