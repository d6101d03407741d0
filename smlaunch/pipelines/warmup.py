"""Warm the preprocessing hosts' Ray workers while the trainer starts.

A job's first batch used to wait for the data hosts' first Ray workers to start and import what
the chain needs (torch and torchvision for decoding, PIL, pyarrow, Ray Data's own modules): 4-6 s
per worker, paid after the train worker asked for data. Ray Train takes longer than that to start
its controller and worker group (about 20 s on the 2-core VM), and the data hosts sit idle
meanwhile. So when training starts, every CPU slot of the preprocessing hosts runs one small task
that does those imports and runs the chain once on a generated image; Ray keeps the worker
processes (as many as the host's CPUs: its idle pool's size) and gives them the read and chain
tasks that follow.

The same goes for Ray Data itself: `warm_ray_data` runs its first execution on the cluster (one
row) so its helper actors exist before the trainer's first request (see there).

Nothing waits for the warm-up: a slot that is still warming when the first read task comes
only delays that task by what is left of its imports, as before. A chain that fails here (a user
op that does not import) fails again, with its proper error, on the first real batch; the warm-up
only returns the error's text.
"""

from __future__ import annotations


def warm_preprocess_workers(plan, ops: list) -> list:
    """Start one warm-up task per CPU slot of every host that runs the chain; returns their refs
    (nobody needs to wait for them)."""
    import ray

    from smlaunch.cluster.plan import host_selector

    subcluster = "data" if plan.data_selector else "train"
    task = ray.remote(warm_worker)
    refs = []
    for host in plan.hosts:
        if host.subcluster != subcluster:
            continue
        pinned = task.options(num_cpus=1, max_retries=0, label_selector=host_selector(host.name))
        refs.extend(pinned.remote(list(ops)) for _ in range(max(int(host.num_cpus), 1)))
    return refs


def warm_ray_data(plan):
    """Start one Ray Data execution of one row, run by a task on the driver's node with the
    preprocessing hosts' selector; returns its ref (nobody needs to wait for it).

    A cluster's first execution creates Ray Data's detached helper actors (its autoscaling
    coordinator and its stats actor, each pinned to the node that asks first), and until the
    coordinator answers, the executor runs one task at a time: a cold job's first batch waited
    about 2 s for that while the data hosts' other CPUs sat idle (Ray timeline, 2-core VM). Done
    here, it happens while Ray Train starts. (Every later execution waits only for the
    coordinator's answer, not for the actor: `pipelines.budget`.) On the driver's node, because the actors stay where
    they are made: a data host may be lost, the driver's node is the run's."""
    import ray

    here = {"ray.io/node-id": ray.get_runtime_context().get_node_id()}
    return ray.remote(_one_row).options(num_cpus=0, max_retries=0, label_selector=here).remote(
        plan.preprocess_selector)


def _one_row(selector: dict | None) -> dict:
    """(the node this ran on, the node that made the row)."""
    import ray
    import ray.data

    ctx = ray.data.DataContext.get_current()
    ctx.execution_options.label_selector = selector
    ctx.enable_progress_bars = False
    (row,) = ray.data.range(1, override_num_blocks=1).map(_node_of).take(1)
    return {"node": ray.get_runtime_context().get_node_id(), "row_made_on": row["node"]}


def _node_of(row: dict) -> dict:
    import ray

    return {"node": ray.get_runtime_context().get_node_id()}


def warm_worker(ops: list) -> dict:
    """In the worker: the imports of a read and a chain task, then the job's `Chain` on one small
    JPEG (which also marks the process warm, so the first real batch's time is the chain's own).
    Returns where it ran (host, pid) and the chain's error, if any."""
    import io
    import os

    import numpy as np
    import pyarrow  # noqa: F401 (the read tasks' blocks)
    import ray
    import ray.data  # noqa: F401 (Ray Data's task-side modules)
    from PIL import Image

    from smlaunch.cluster.plan import this_host
    from smlaunch.pipelines.ops.chain import Chain

    done = {"host": this_host(), "pid": os.getpid(), "error": None}
    buf = io.BytesIO()
    Image.fromarray(np.full((32, 32, 3), 128, dtype=np.uint8)).save(buf, format="JPEG")
    batch = {"image": np.array([buf.getvalue()], dtype=object), "label": np.zeros(1, np.int64),
             "id": np.zeros(1, np.int64)}
    try:
        Chain(ops, [])(batch)
    except Exception as exc:  # the real batch raises it again, with the sample named
        return {**done, "error": f"{type(exc).__name__}: {exc}"}
    return done
