"""Warm the preprocessing hosts' Ray workers while the trainer starts.

A job's first batch used to wait for the data hosts' first Ray workers to start and import what
the chain needs (torch and torchvision for decoding, PIL, pyarrow, Ray Data's own modules): 4-6 s
per worker, paid after the train worker asked for data. Ray Train takes longer than that to start
its controller and worker group (about 20 s on the 2-core VM), and the data hosts sit idle
meanwhile. So when training starts, every CPU slot of the preprocessing hosts runs one small task
that does those imports and runs the chain once on a generated image; Ray keeps the worker
processes (as many as the host's CPUs: its idle pool's size) and gives them the read and chain
tasks that follow.

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
