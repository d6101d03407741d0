"""A stop as Ray's own preemption signal: the train hosts' nodes drained with reason PREEMPTION.

Ray Train 2.60 tells a loop of a coming preemption through `ray.train.get_preemption_info()`,
which it learns from node drains only: a `PreemptionWatcher` actor polls the GCS's draining nodes
(`ray/train/v2/_internal/execution/preemption.py`). KubeRay and Ray's autoscaler drain a node before
its machine goes; a SIGTERM to sm-launch (StopTrainingJob, a spot reclaim, `docker stop`) reaches
no drain by itself. So on a stop sm-launch drains the train hosts' nodes itself, with the stop's
grace as the deadline, and an unmodified loop sees the stop where Ray's docs tell it to look.

A draining node takes no new tasks or actors; the running ones (the train workers, the data hosts'
chain elsewhere) go on, so the loop can report its checkpoint and return.
"""

from __future__ import annotations

import logging
import time

log = logging.getLogger("smlaunch")

POLL_INTERVAL_S = "0.5"
"""`RAY_TRAIN_PREEMPTION_POLL_INTERVAL_S` (Ray's default: 5): a drain reaches every rank's next
`get_preemption_info()` within about this, well inside the 2 s a stop allows it."""


def node_ids(hosts: list[str]) -> dict[str, str]:
    """Host name -> Ray node id (hex) of the alive nodes of `hosts`."""
    import ray

    from smlaunch.cluster.labels import host_label

    label = host_label()
    return {
        n["Labels"][label]: n["NodeID"]
        for n in ray.nodes()
        if n.get("Alive") and n.get("Labels", {}).get(label) in hosts
    }


def drain_hosts(hosts: list[str], deadline_s: float, why: str) -> list[str]:
    """Drain the nodes of `hosts` as preempted, to be gone in `deadline_s`; the hosts drained."""
    from smlaunch._ray_compat import drain_node

    deadline_ms = int((time.time() + deadline_s) * 1000)
    drained = []
    for host, node_id in node_ids(hosts).items():
        try:
            accepted, message = drain_node(node_id, why, deadline_ms)
        except Exception as exc:  # the stop still reaches the built-in loop through the KV store
            log.debug("drain of %s failed: %s", host, exc)
            continue
        if accepted:
            drained.append(host)
        else:
            log.debug("drain of %s refused: %s", host, message)
    return drained
