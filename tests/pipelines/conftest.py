"""Shared fixtures: a real S3-protocol server on 127.0.0.1 (moto in server mode) and a real
3-node Ray cluster (one train host, two data hosts), one of each per test session."""

import os

import pytest

from smlaunch.pipelines.local_s3 import LocalS3


@pytest.fixture(scope="session")
def s3_endpoint():
    with LocalS3() as server:
        yield server.endpoint_url


DATA_HOSTS = ("algo-2", "algo-3")


@pytest.fixture(scope="session")
def data_cluster():
    # The nodes' workers inherit this environment: throwaway keys for the local S3 server.
    extra = {**{k: v for k, v in LocalS3.environment().items() if v}, "RAY_USAGE_STATS_ENABLED": "0",
             "RAY_AUTH_MODE": "disabled"}
    saved = {k: os.environ.get(k) for k in extra}
    os.environ.update(extra)
    import ray
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, connect=False, head_node_args=dict(
        num_cpus=1, labels={"ray-subcluster": "train", "sm-host": "algo-1"}, include_dashboard=False,
        object_store_memory=100 * 2**20))
    for host in DATA_HOSTS:
        cluster.add_node(num_cpus=1, labels={"ray-subcluster": "data", "sm-host": host},
                         object_store_memory=100 * 2**20, include_log_monitor=False)
    cluster.wait_for_nodes()
    ray.init(address=cluster.address, namespace="smlaunch-test")
    ray.data.DataContext.get_current().enable_progress_bars = False
    yield ray
    ray.shutdown()
    cluster.shutdown()
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


@pytest.fixture
def s3(s3_endpoint, monkeypatch):
    """A boto3 S3 client of the local server, with throwaway credentials."""
    import boto3

    for key, value in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                       "AWS_DEFAULT_REGION": "us-east-1", "AWS_ENDPOINT_URL": s3_endpoint}.items():
        monkeypatch.setenv(key, value)
    return boto3.client("s3", endpoint_url=s3_endpoint)
