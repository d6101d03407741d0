"""A simulated heterogeneous cluster on this machine: one real Ray node per planned host.

Each host of the plan becomes a separate raylet with its own CPUs, GPUs and labels
(`ray-subcluster`, `sm-host`, `sm-group`), so Ray schedules across them exactly as it would
across SageMaker hosts. The cluster runs with token authentication (a fresh token per run, in
this process's environment only) and without a dashboard.

Ray's own logs (every node's and worker's, in the session directory the simulated nodes share)
are copied to the run directory's `logs/ray/` when the cluster goes down, so a run's logs live
with the run; the console shows them only with `-v`.
"""

from __future__ import annotations

import logging
import os
import secrets
from pathlib import Path
from typing import TYPE_CHECKING

from smlaunch.cluster.plan import LOCAL_OBJECT_STORE_MIN, HostPlan, LaunchPlan

if TYPE_CHECKING:
    from ray.cluster_utils import Cluster

log = logging.getLogger(__name__)

NODE_WAIT_S = 120


class LocalCluster:
    """Context manager: start every planned host as a Ray node, connect, and tear it all down."""

    def __init__(self, plan: LaunchPlan):
        self.plan = plan
        self.cluster: Cluster | None = None
        self.session_dir: str | None = None
        self._saved_env: dict[str, str | None] = {}

    def __enter__(self) -> LocalCluster:
        from smlaunch.user_code import code_folder

        # Before importing ray: it reads the auth mode when it loads.
        self._set_env(
            {
                "RAY_USAGE_STATS_ENABLED": "0",
                "RAY_AUTH_MODE": "token",
                "RAY_AUTH_TOKEN": secrets.token_hex(32),
                "RAY_ADDRESS": None,
                # Ray Train copies a worker's print() into its logger too: each line twice.
                "RAY_TRAIN_ENABLE_PRINT_PATCH": "0",
                # The user's modules (model factory, task, map ops) are imported from the folder
                # sm-launch runs in, by every simulated host's workers too (`smlaunch.user_code`).
                "SM_LAUNCH_CODE_DIR": code_folder(),
            }
        )
        from smlaunch.cluster.ray_auth import reload_ray_auth

        reload_ray_auth()
        import ray
        from ray.cluster_utils import Cluster

        from smlaunch import console

        console.quiet_ray()
        try:
            head = self.plan.head_host
            cluster = self.cluster = Cluster(
                initialize_head=True, connect=False, shutdown_at_exit=True, head_node_args=self._node_args(head)
            )
            for host in self.plan.hosts:
                if host.name != head.name:
                    # All simulated nodes share one session log directory: one log monitor
                    # (the head's) forwards every worker's output, once.
                    cluster.add_node(wait=False, include_log_monitor=False, **self._node_args(host))
            cluster.wait_for_nodes(timeout=NODE_WAIT_S)
            context = ray.init(
                address=cluster.address,
                **console.ray_init_options(),
                runtime_env={"worker_process_setup_hook": "smlaunch.cluster.worker_setup.setup"},
            )
            self.session_dir = context.address_info.get("session_dir")  # type: ignore[attr-defined]  # ray.init is typed BaseContext; a driver gets a RayContext
        except BaseException:
            self.__exit__(None, None, None)
            raise
        log.debug("local cluster up: %d nodes at %s", len(self.plan.hosts), cluster.address)
        return self

    def _node_args(self, host: HostPlan) -> dict:
        from smlaunch.cluster.node import worker_pool_env

        return {
            "num_cpus": host.num_cpus,
            "num_gpus": host.num_gpus,
            "labels": dict(host.labels),
            "include_dashboard": False,
            "env_vars": worker_pool_env(host.num_cpus),
            "object_store_memory": host.object_store_bytes or LOCAL_OBJECT_STORE_MIN,
        }

    def __exit__(self, *exc) -> None:
        import ray

        try:
            if ray.is_initialized():
                ray.shutdown()
        finally:
            if self.cluster is not None:
                self.cluster.shutdown()
                self.cluster = None
            self._keep_ray_logs()
            self._restore_env()

    def _keep_ray_logs(self) -> None:
        """Copy the session's logs into `<run dir>/logs/ray`."""
        if self.session_dir is not None:
            from smlaunch.cluster.node import keep_ray_logs

            keep_ray_logs(Path(self.session_dir) / "logs", Path(self.plan.run_dir) / "logs" / "ray")

    def _set_env(self, values: dict[str, str | None]) -> None:
        for key, value in values.items():
            self._saved_env[key] = os.environ.get(key)
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value

    def _restore_env(self) -> None:
        for key, value in self._saved_env.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        self._saved_env.clear()
