"""Cluster bring-up: time until all 3 hosts of a job have joined, sm-launch vs bare `ray start`.

Side by side on this machine, alternating, same token authentication and per-node temp dirs:

- **sm-launch**: configs/tiny.yaml's 3-host SageMaker job as `sm-launch simulate --command check`
  lays it out (algo-1 the GPU host and head, algo-2 and algo-3 CPU hosts), one `sm-launch check`
  process per host started at once, as SageMaker starts them;
  timed from the spawn until the head prints `hosts_joined=3`. That includes everything a
  real host pays: Python start-up, reading /opt/ml, planning, resolving the head, waiting for
  its port and `ray start`.
- **bare**: the sequence a person types, `ray start --head`, then `ray start --address=...` for
  each worker (each command returns once its node is up), timed until the GCS lists 3 alive nodes.

    python bench/bringup.py [--rounds 3]

Ends with `RESULT bringup ratio=<sm-launch / bare median> goal=1.2`.
"""

from __future__ import annotations

import argparse
import os
import secrets
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from results_log import report_result  # bench/, this script's folder

ROOT = Path(__file__).resolve().parents[1]

RAY_CLI = [sys.executable, "-c", "from ray.scripts.scripts import main; main()"]


def time_sm_launch(root: Path) -> float:
    """configs/tiny.yaml's 3 hosts as `sm-launch simulate --command check` lays them out."""
    from smlaunch.cluster.environment import detect_local_environment
    from smlaunch.cluster.plan import build_plan
    from smlaunch.config import load_config
    from smlaunch.launcher.local.run import local_data
    from smlaunch.launcher.sagemaker.simulate import SimulatedHosts

    cfg = load_config(ROOT / "configs" / "tiny.yaml", [f"run.dir={root}"])
    plan = build_plan(cfg, detect_local_environment())
    with local_data(cfg, plan):
        job = SimulatedHosts(
            Path(plan.run_dir), {h.name: Path(h.opt_ml) for h in plan.hosts}, cfg.model_dump(mode="json")
        )
        try:
            started = time.monotonic()
            for host in plan.hosts:
                job.start(host.name, "check")
            job.wait_for_text(plan.head, "hosts_joined=3 ", 180)
            took = time.monotonic() - started
            codes = job.wait(120)
            if set(codes.values()) != {0}:
                raise SystemExit(f"sm-launch check failed: {codes}\n{job.log(plan.head)[-2000:]}")
            return took
        finally:
            job.cleanup()


def time_bare(root: Path) -> float:
    from ray._raylet import GcsClient

    from smlaunch.cluster.rendezvous import free_port

    port = free_port()
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S": "0"}
    env.pop("RAY_ADDRESS", None)
    temp = Path(tempfile.mkdtemp(prefix="smb", dir="/tmp"))
    common = ["--node-ip-address=127.0.0.1", "--num-cpus=1", "--disable-usage-stats"]
    commands = [
        [
            "start",
            "--head",
            f"--port={port}",
            "--include-dashboard=false",
            f"--temp-dir={temp}/h",
            "--labels=ray-subcluster=train",
            *common,
        ]
    ]
    commands += [
        ["start", f"--address=127.0.0.1:{port}", f"--temp-dir={temp}/w{i}", "--labels=ray-subcluster=data", *common]
        for i in (1, 2)
    ]
    try:
        started = time.monotonic()
        for args in commands:
            subprocess.run(RAY_CLI + args, env=env, check=True, capture_output=True, timeout=120)
        gcs = GcsClient(address=f"127.0.0.1:{port}")
        while sum(n.state == 0 for n in gcs.get_all_node_info(timeout=10).values()) < 3:
            if time.monotonic() - started > 120:
                raise SystemExit("bare ray start: 3 nodes never joined")
            time.sleep(0.05)
        return time.monotonic() - started
    finally:
        _kill_nodes(str(temp))
        shutil.rmtree(temp, ignore_errors=True)


def _kill_nodes(marker: str) -> None:
    """Stop only the bare nodes (their command lines name our temp dir); `ray stop` would kill every
    Ray process on the machine."""
    import psutil

    for proc in psutil.process_iter(["cmdline"]):
        try:
            if any(marker in part for part in proc.info["cmdline"] or []):
                proc.kill()
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    os.environ.setdefault("SMLAUNCH_CACHE", str(Path.home() / ".cache" / "smlaunch"))
    # Before Ray is imported: it reads the auth mode once. The bare nodes inherit this token.
    os.environ.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=secrets.token_hex(32))
    ours, bare = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            bare.append(time_bare(Path(tmp)))
            ours.append(time_sm_launch(Path(tmp) / f"job{r}"))
            print(f"round {r + 1}: sm-launch {ours[-1]:.2f} s, bare ray start {bare[-1]:.2f} s", flush=True)
    mine, theirs = statistics.median(ours), statistics.median(bare)
    print(
        f"median: sm-launch {mine:.2f} s (3 hosts started at once), bare ray start {theirs:.2f} s "
        f"(head then 2 workers, one after another); {os.cpu_count()} CPUs"
    )
    report_result(f"RESULT bringup ratio={mine / theirs:.2f} goal=1.2")
    return 0


if __name__ == "__main__":
    sys.exit(main())
