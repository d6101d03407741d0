"""Shared fixtures: a per-session dataset cache, the path of the repo's configs, and a real 3-node
Ray cluster (one train host, two data hosts) shared by the in-process Ray tests.

One cluster for the whole session, not one per test: a Ray Data pipeline run in a second Ray
session of the same pytest process failed with OwnerDiedError on an object of the first session's
driver, so in-process tests share this one, and tests that start a cluster of their own do it in a
subprocess."""

from __future__ import annotations

from pathlib import Path

import pytest

from smlaunch.pipelines.sources.local_s3 import LocalS3
from support.environment import environment

ROOT = Path(__file__).resolve().parents[1]
pytest_plugins = ["support.s3"]  # the local S3 server's fixtures, for every folder


@pytest.fixture(scope="session", autouse=True)
def dataset_cache(tmp_path_factory):
    """Keep the builtin dataset out of the user's home; built once per test session."""
    cache = tmp_path_factory.mktemp("cache")
    with environment(SMLAUNCH_CACHE=str(cache)):
        yield cache


@pytest.fixture
def configs() -> Path:
    return ROOT / "configs"


DATA_HOSTS = ("algo-2", "algo-3")


@pytest.fixture(scope="session")
def data_cluster():
    # The nodes' workers inherit this environment: throwaway keys for the local S3 server.
    extra = {
        **{k: v for k, v in LocalS3.environment().items() if v},
        "RAY_USAGE_STATS_ENABLED": "0",
        "RAY_AUTH_MODE": "disabled",
    }
    with environment(**extra):
        import ray
        from ray.cluster_utils import Cluster

        from smlaunch.cluster.node import worker_pool_env

        cluster = Cluster(
            initialize_head=True,
            connect=False,
            head_node_args=dict(
                num_cpus=1,
                labels={"ray-subcluster": "train", "sm-host": "algo-1"},
                include_dashboard=False,
                object_store_memory=100 * 2**20,
                env_vars=worker_pool_env(1),
            ),
        )
        for host in DATA_HOSTS:
            cluster.add_node(
                num_cpus=1,
                labels={"ray-subcluster": "data", "sm-host": host},
                object_store_memory=100 * 2**20,
                include_log_monitor=False,
                env_vars=worker_pool_env(1),
            )
        cluster.wait_for_nodes()
        ray.init(address=cluster.address, namespace="smlaunch-test")
        ray.data.DataContext.get_current().enable_progress_bars = False
        yield ray
        ray.shutdown()
        cluster.shutdown()


@pytest.fixture
def job(tmp_path):
    """A fake 3-host SageMaker job (`tests/support/sagemaker_job.py`), cleaned up after the test."""
    from support.sagemaker_job import FakeJob

    fake = FakeJob(tmp_path)
    yield fake
    fake.cleanup()
