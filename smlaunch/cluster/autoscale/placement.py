"""Where the chain's tasks may run while the data hosts change (issue 42).

The chain's Dataset is built once, with the `ray-subcluster: data` selector; Ray Data sizes its
budget by that bucket. Two things go wrong with that selector alone while hosts come and go:

* a chain task queued for a free slot is pending demand, and the autoscaler starts a node for it
  (Ray Data's liveness rule always lets an operator run one task over its budget): hosts joined
  that no decision asked for (1 -> 3 before the first decision in tests/launcher/attached/test_elastic.py);
* a host being drained must take no new task, yet it still carries the label until it is gone.

So each chain task is placed on the hosts the loop counts as joined (`ray.io/node-id in(...)`),
a list the loop publishes in the cluster's KV store (`publish`) and every process that submits
chain tasks reads at most once a second (`JoinedHosts`, Ray Data's `ray_remote_args_fn`, called
before each task). A task for those nodes can never be met by a new node, so it is no demand for
one; a drained host drops off the list before its drain starts. With none joined
(`autoscale.min_data_hosts: 0` over a sealed cache) the list is a node id no node has, so the
tasks go where their fallback sends them (the train hosts) and are still no demand: with the
plain selector there, a task waiting for a train host's CPU made the autoscaler start a data host
no decision asked for (bench/elastic.py's cached arm: one joined 55 s after both were given back,
and the loop gave it back 40 s later).
"""

from __future__ import annotations

import json
import time

KEY = b"elastic_data_hosts"
REFRESH_S = 1.0
NONE_JOINED = "none-joined"
"""The node id the chain's tasks are narrowed to while no data host is joined: no node has it."""


def publish(nodes: list[str]) -> None:
    """The joined data hosts, for `JoinedHosts` in every process that runs the chain."""
    from smlaunch._ray_compat import kv_put
    from smlaunch.cluster.job_state import NAMESPACE

    kv_put(KEY, json.dumps(sorted(nodes)).encode(), NAMESPACE)


def withdraw() -> None:
    from smlaunch._ray_compat import kv_delete
    from smlaunch.cluster.job_state import NAMESPACE

    kv_delete(KEY, NAMESPACE)


class JoinedHosts:
    """Ray Data's `ray_remote_args_fn` for the chain: its label selector narrowed to the published
    hosts, or to `NONE_JOINED` where none are (the plain `selector` until a list is published, or
    where it cannot be read)."""

    def __init__(self, selector: dict[str, str], node_label: str = "ray.io/node-id"):
        self.selector, self.node_label = dict(selector), node_label
        self._read_at = -1e9
        self._nodes: list[str] | None = None

    def __call__(self) -> dict:
        now = time.monotonic()
        if now - self._read_at >= REFRESH_S:
            self._read_at = now
            self._nodes = self._read()
        if self._nodes is None:
            return {"label_selector": dict(self.selector)}
        nodes = self._nodes or [NONE_JOINED]
        return {"label_selector": {**self.selector, self.node_label: f"in({','.join(nodes)})"}}

    def _read(self) -> list[str] | None:
        try:
            return published()
        except Exception:  # the plain selector still places the task
            return self._nodes


def published() -> list[str] | None:
    """The joined data hosts the loop published last (`publish`); None before any list. Raises
    where the cluster's KV store cannot be read."""
    from smlaunch._ray_compat import kv_get
    from smlaunch.cluster.job_state import NAMESPACE

    raw = kv_get(KEY, NAMESPACE)
    return json.loads(raw) if raw else None


def none_joined() -> bool:
    """Whether the loop has published that no data host is joined (`autoscale.min_data_hosts: 0`
    over a sealed cache): the chain's tasks then run on the train hosts, where the epoch's reads
    run too (`pipelines.cache.reader`). False until a list is published, or where it cannot be read."""
    try:
        return published() == []
    except Exception:
        return False
