"""Elastic data hosts down to none over a sealed cache (issue 80): `sm-launch run --address` with
`autoscale.min_data_hosts: 0` and `pipeline.cache: true` on a Ray cluster whose autoscaler starts and
ends real raylets (`smlaunch.cluster.autoscale.fake_cluster`).

Epoch 1 runs the whole chain on the one data host and writes its deterministic prefix (decode,
resize, crop) to the cache; once rank 0 seals it, epochs 2 on read the shards and run only the random rest
(a flip), which the train host's spare CPU carries: the host is given back and the job trains with
no data host: the read and the flip on the train host, through the dataset budgeted by the train
hosts' bucket (`pipelines.dataset.cached_train_selector`). Then the cache's `FINAL` marker is deleted, as a
lost cache folder would be: the host is asked back at once, and the next epoch reads the files again
(the train host has a view of the channel too) and writes the cache anew. A SIGTERM ends the run.
Every complete epoch sees each sample once, before, at and after zero.

Why a job of its own: tests/launcher/attached/test_elastic.py's cluster keeps one data host as its
node type's minimum (its last claim is that the cluster is left so), its sizes are bounded 1..4, and
its heavy phase is a cost in the chain's random tail, which a cache does not shorten; going to zero
needs a node type with no minimum and a chain whose cost is in the prefix.
"""

import json
import re
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from smlaunch.cluster.autoscale.fake_cluster import HEAD_ID, AutoscalingCluster
from support.launcher_output import Output, last_step

ROOT = Path(__file__).resolve().parents[3]
DATA_LABELS = {"ray-subcluster": "data", "sm-group": "data_group"}
EPOCH_ROWS = 1437
EPOCH_STEPS = 45
"""Steps of an epoch at 32 rows a step, the last one short."""


def job_config(tmp_path: Path) -> Path:
    cfg = yaml.safe_load((ROOT / "configs" / "tiny.yaml").read_text())
    cfg["cluster"]["instance_groups"] = [
        {"name": "train_group", "instance_type": "ml.g5.12xlarge", "instance_count": 1},
        {"name": "data_group", "instance_type": "ml.c5.xlarge", "instance_count": 1},
    ]
    cfg["channels"] = {
        "train": {
            "source": str(tmp_path / "train"),
            "record_format": "image_folder",
            "instance_groups": ["data_group"],
            "shuffle": {"buffer_rows": 64},
        }
    }
    cfg["pipeline"]["ops"] = [
        {"op": "decode_image"},
        {"op": "resize", "size": 144},
        {"op": "center_crop", "size": 128},
        {"op": "horizontal_flip"},
        {"op": "to_uint8_chw"},
    ]
    # 128 px: a trainer of a few hundred images/s and epochs of seconds, whose waits the loop can
    # read (at 32 px it took 1,100 images/s, an epoch every 1.5 s, its wait all epoch starts)
    cfg["pipeline"].update(cache=True, cache_dir=str(tmp_path / "cache"))
    # Two train workers (of the instance type's 4 GPUs), 16 rows each: the switch between datasets is
    # rank 0's word, broadcast (`CacheEpochs.agree`), which one rank never exercises.
    cfg["trainer"].update(
        max_workers=2,
        batch_size=16,
        steps=100000,
        checkpoint_interval=0,
        log_every=5,
        validation_every_epochs=0,
        checkpoint_every_s=0,
    )
    cfg["autoscale"] = {
        "min_data_hosts": 0,
        "max_data_hosts": 1,
        "target_data_wait_pct": 5,
        "cooldown_s": 6,
        "window_steps": 10,
    }
    cfg["run"] = {"dir": str(tmp_path / "runs"), "name": "zero"}
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def first_data_host(cluster: AutoscalingCluster, env: dict) -> None:
    """One data host up before the job, as KubeRay's `replicas: 1` starts one (`sm-launch kuberay`
    with `min_data_hosts: 0`): the node type has no minimum, so a driver of its own asks for it (in a
    process of its own: the suite's process may hold another cluster's connection). The job's own
    request replaces this one once it stands."""
    code = (
        "import ray; from ray.autoscaler.sdk import request_resources; "
        f"ray.init(address={cluster.address!r}, logging_level='ERROR', log_to_driver=False); "
        f"request_resources(bundles=[{{'CPU': 2}}], bundle_label_selectors=[{DATA_LABELS!r}])"
    )
    subprocess.run([sys.executable, "-c", code], env=env, check=True, capture_output=True, timeout=120)
    deadline = time.monotonic() + 120
    while cluster.count_nodes(DATA_LABELS) < 1:
        assert time.monotonic() < deadline, "the fake cluster started no data host in 120 s"
        time.sleep(1)


@pytest.mark.ray
@pytest.mark.timeout(900)  # its own waits have deadlines
def test_the_data_hosts_go_to_none_over_a_sealed_cache_and_come_back_when_it_is_lost(tmp_path):
    from support.user_layouts import digits, write_image_folder

    write_image_folder(tmp_path / "train", digits("train"))
    config = job_config(tmp_path)
    cluster = AutoscalingCluster(
        {"data": {"resources": {"CPU": 2}, "labels": DATA_LABELS, "min_workers": 0, "max_workers": 1}},
        head_labels={"ray-subcluster": "train", "sm-group": "train_group"},
        head_cpus=5,  # one CPU for each of the 2 train workers, 3 spare for the chain at zero
        idle_timeout_s=120,
    ).start()
    try:
        env = {**cluster.env, "PYTHONPATH": str(ROOT)}
        for key in ("RAY_OVERRIDE_NODE_ID_FOR_TESTING", "RAY_CLOUD_INSTANCE_ID", "RAY_FAKE_CLUSTER"):
            env.pop(key, None)
        first_data_host(cluster, env)
        proc = subprocess.Popen(
            [sys.executable, "-m", "smlaunch", "run", str(config), "--address", cluster.address],
            env=env,
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        out = Output(proc)
        try:
            # 1. Epoch 1 writes the cache on the data host; once sealed, the host goes.
            out.wait_for(
                lambda ls: any("-1 data host (1 -> 0)" in x for x in ls), 300, "the last host given back", proc
            )
            released = next(i for i, x in enumerate(out.lines) if "-1 data host (1 -> 0)" in x)
            sealed = [i for i, x in enumerate(out.lines) if re.search(r"cache: sealed", x)]
            assert sealed and sealed[0] < released, out.tail()
            assert "the chain on the train hosts' spare CPUs" in out.lines[released]
            deadline = time.monotonic() + 120
            while cluster.count_nodes(DATA_LABELS) and time.monotonic() < deadline:
                time.sleep(1)
            assert cluster.count_nodes(DATA_LABELS) == 0, out.tail()
            # 2. A whole epoch and more trained with no data host: the read and the flip on the train host.
            at_zero = last_step(out.lines)
            whole = -(-at_zero // EPOCH_STEPS) + 1  # the epochs complete once the first one wholly at zero ends
            out.wait_for(
                lambda ls: last_step(ls) >= whole * EPOCH_STEPS + 3, 300, "an epoch wholly with no data host", proc
            )
            assert cluster.count_nodes(DATA_LABELS) == 0 and "+1 data host" not in "\n".join(out.lines), out.tail()
            # 3. The cache lost (its FINAL marker gone, as a deleted cache folder's): the hosts the job started
            # with are asked back at once, the next epoch reads the files (the train host has a view of
            # them too) and writes the cache anew.
            finals = list((tmp_path / "cache").glob("*/FINAL"))
            assert len(finals) == 1, finals
            finals[0].unlink()
            out.wait_for(lambda ls: any("+1 data host (0 -> 1)" in x for x in ls), 120, "a host asked back", proc)
            assert "the epoch reads no sealed cache" in next(x for x in out.lines if "+1 data host (0 -> 1)" in x)
            out.wait_for(
                lambda ls: sum("cache: sealed" in x for x in ls) >= 2, 300, "the cache written and sealed anew", proc
            )
            assert any("this epoch reads the channel's files again" in x for x in out.lines), out.tail()
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=120) == 143, "\n".join(out.lines[-60:])
        finally:
            if proc.poll() is None:
                proc.kill()
        print("\n".join(x for x in out.lines if "autoscale:" in x or "cache" in x))
        zero_waits = [
            float(m.group(1)) for x in out.lines[released:] if (m := re.search(r"step=\d+ .*data_wait_pct=([\d.]+)", x))
        ]
        print(f"at zero: median data wait {statistics.median(zero_waits):.1f} % over {len(zero_waits)} logged steps")
        report = json.loads((tmp_path / "runs" / "zero" / "output" / "data" / "report.json").read_text())
        assert report["autoscale"]["sizes"][:3] == [1, 0, 1], report["autoscale"]
        assert report["plan"]["train_workers"] == 2, report["plan"]
        # the chain ran on the data host, then on the train host (the head: `fake_cluster.HEAD_ID`)
        rows = report["rows_by_host"]
        assert rows.get(HEAD_ID, 0) > 0 and sum(v for k, v in rows.items() if k != HEAD_ID) > 0, rows
        epochs = report["sample_accounting"]["epochs"]
        complete = [e for e in epochs if e["complete"]]
        assert whole >= 2 and len(complete) >= whole, (whole, epochs)  # epoch 1, then one wholly at zero
        for e in complete:
            assert (e["distinct"], e["duplicated"], e["missing"]) == (EPOCH_ROWS, 0, 0), e
        assert all(e["duplicated"] == 0 for e in epochs), epochs
    finally:
        cluster.stop(keep_logs=tmp_path / "ray-logs")
