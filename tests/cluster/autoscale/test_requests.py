"""Data hosts asked of a real autoscaler by label, held while Ray Data makes its own requests, and
given back (issue 42, item 1's mechanism).

The cluster is Ray's fake multi-node provider under autoscaler v2 (`smlaunch.cluster.autoscale.fake_cluster`):
its nodes are real raylets, started and ended by the autoscaler. The driver runs in a process of
its own, as the launcher's does. Ray Data's coordinator sends its merged requests every 20 s and
a direct `request_resources` would be overwritten by them: the hosts must still be there after a
Ray Data execution and a tick. A host given back while busy is drained: its running task finishes
there, new tasks go to the other, and the autoscaler ends it; the last goes once idle (5 s here).
"""

import re
import subprocess
import sys

import pytest

from smlaunch.cluster.autoscale.fake_cluster import AutoscalingCluster

LABELS = {"ray-subcluster": "data", "sm-group": "data_group"}
DRIVER = """
import sys, time, ray
from smlaunch.cluster.autoscale.requests import DataHostRequests, drain, labelled_nodes
LABELS = {labels!r}
ray.init(address=sys.argv[1], logging_level="ERROR")
ray.data.DataContext.get_current().enable_progress_bars = False
started = time.monotonic()

def ours_asked():  # bundles with our labels in the constraint the autoscaler reads from the GCS
    from ray.autoscaler.v2.sdk import get_cluster_resource_state
    state = get_cluster_resource_state(ray._raylet.GcsClient(address=ray.get_runtime_context().gcs_address))
    return sum(r.count for c in state.cluster_resource_constraints for r in c.resource_requests
               if any(x.label_key == "sm-group" and "data_group" in x.label_values
                      for s in r.request.label_selectors for x in s.label_constraints))

def settle(n, timeout_s=60):
    deadline = time.monotonic() + timeout_s
    while len(labelled_nodes(LABELS)) != n:
        if time.monotonic() > deadline:
            print(f"stuck at {{len(labelled_nodes(LABELS))}} data nodes, waiting for {{n}}", flush=True)
            sys.exit(1)
        time.sleep(0.25)
    print(f"{{n}} data nodes at {{time.monotonic() - started:.1f}} s", flush=True)

requests = DataHostRequests(LABELS, cpus_per_host=1)
settle(0)
requests.want(2)
settle(2)
rows = ray.data.range(200).map_batches(lambda b: b, batch_size=10, label_selector={{"ray-subcluster": "data"}}).count()
time.sleep(24)  # Ray Data's coordinator has merged and sent its requests since
print(f"rows {{rows}}; after the coordinator's tick {{len(labelled_nodes(LABELS))}} data nodes", flush=True)
# Give back a busy host: the request shrinks, the host is drained while a task still runs there.
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
busy = labelled_nodes(LABELS)[0]["NodeID"]

@ray.remote(num_cpus=1, max_retries=0)
def where(sleep_s):
    time.sleep(sleep_s)
    return ray.get_runtime_context().get_node_id()

running = where.options(scheduling_strategy=NodeAffinitySchedulingStrategy(busy, soft=False)).remote(6)
time.sleep(1)
requests.want(1)
print(f"asked of the autoscaler before the drain: {{ours_asked()}} data hosts", flush=True)
drain(busy, "fewer data hosts")
later = ray.get([where.options(label_selector={{"ray-subcluster": "data"}}).remote(0) for _ in range(6)])
print(f"the running task finished on the drained host: {{ray.get(running) == busy}}; "
      f"new tasks there: {{later.count(busy)}}", flush=True)
settle(1)
requests.close()
settle(0)
"""


@pytest.mark.ray
def test_data_hosts_asked_by_label_join_outlive_ray_datas_own_requests_and_a_busy_one_is_drained_away(tmp_path):
    cluster = AutoscalingCluster(
        {"data": {"resources": {"CPU": 1}, "labels": LABELS, "max_workers": 2}},
        head_labels={"ray-subcluster": "train"},
        idle_timeout_s=5,
    ).start()
    try:
        done = subprocess.run(
            [sys.executable, "-c", DRIVER.format(labels=LABELS), cluster.address],
            env=cluster.env,
            capture_output=True,
            text=True,
            timeout=300,
        )
    finally:
        cluster.stop()
    lines = [line for line in done.stdout.splitlines() if "data nodes" in line]
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    # a smaller request is the autoscaler's before `want` returns: a drain right after it starts no
    # replacement for the drained host (test_elastic once saw one: sizes 1, 2, 3, 2, 2, 1)
    assert "asked of the autoscaler before the drain: 1 data hosts" in done.stdout, done.stdout[-3000:]
    # Ray's autoscaler lines reach the driver's stdout too, a line of ours sometimes after one of
    # theirs with no newline between: the count is the number right before " data nodes"
    assert [re.search(r"(\d+) data nodes", line)[1] for line in lines] == ["0", "2", "2", "1", "0"], lines
    assert "rows 200; after the coordinator's tick 2 data nodes" in done.stdout
    assert "the running task finished on the drained host: True; new tasks there: 0" in done.stdout
