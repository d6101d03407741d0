"""A host's Ray node keeps its idle workers up to the tasks the job runs on it at once
(`cluster.node.worker_pool_env`): a data host runs a chain task and a read task (no CPU of Ray's)
per CPU, and a worker Ray killed between them was started again, importing torch again."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

KEPT = """
import os, sys, time
from smlaunch.config.loader import load_config
from smlaunch.cluster.environment import detect_local_environment
from smlaunch.cluster.local import LocalCluster
from smlaunch.cluster.plan import build_plan

cfg = load_config("configs/tiny.yaml", [f"run.dir={sys.argv[1]}"])
plan = build_plan(cfg, detect_local_environment())
data = next(h for h in plan.hosts if h.labels.get("ray-subcluster") == "data")
with LocalCluster(plan):
    import ray

    here = {"label_selector": {"sm-host": data.name}}

    @ray.remote
    def task():
        time.sleep(4)  # long enough that Ray starts a worker for each task (one at a time per CPU)
        return os.getpid()

    def round_():
        chain = [task.options(num_cpus=1, **here).remote() for _ in range(data.num_cpus)]
        reads = [task.options(num_cpus=0, **here).remote() for _ in range(data.num_cpus + 1)]
        return set(ray.get(chain + reads, timeout=120))

    first = round_()
    time.sleep(4)  # Ray kills a worker idle for a second above its soft limit
    gone = sorted(pid for pid in first if not os.path.exists(f"/proc/{pid}"))
    print(data.num_cpus, len(first), gone)
"""


def test_a_data_host_keeps_the_workers_of_its_chain_and_read_tasks_between_tasks(tmp_path):
    done = subprocess.run(
        [sys.executable, "-c", KEPT, str(tmp_path / "runs")], capture_output=True, text=True, timeout=300, cwd=ROOT
    )
    assert done.returncode == 0, done.stderr[-3000:]
    cpus, workers, gone = done.stdout.split(maxsplit=2)
    assert int(workers) > int(cpus), done.stdout  # more workers than Ray's default keeps idle: the test can fail
    assert gone.strip() == "[]", f"workers killed while idle: {gone}"
