"""Time to first step: `sm-launch configs/hetero.yaml` against the same job written with Ray alone,
on each of sm-launch's three paths.

Side by side on this machine, taking turns, `--rounds` of each (median):

- **local**: `sm-launch configs/hetero.yaml --set trainer.steps=20` in a fresh process, as a user
  types it. Its report's phases (`launcher.report.phases`: seconds after the command) give the first
  and last steps; the process's end gives the exit.
- **simulate**: `sm-launch simulate` of the same config: the SageMaker path, one `sm-launch`
  process per host (`launcher.sagemaker.simulate`); the phases and the exit are the head host's, in
  seconds after its own command (the report's `command_started_at`), the exit being the whole
  simulated job's.
- **address**: `sm-launch CONFIG --address` on a running cluster started once with `ray start` as
  an operator would (a train-labelled head of 1 CPU and a data-labelled worker of 2 CPUs, the local
  plan's shape, token authentication); its start is not timed, since the cluster already runs.
- **ray**: `bench/ray_reference_job.py`, configs/hetero.yaml's shape as Ray's docs write it (two
  labelled local nodes, a `map_batches` PNG decode pinned to the data node, a `TorchTrainer` with
  one CPU worker building resnet10t), in a fresh process, timed the same way.

`--before DIR` also times another checkout of smlaunch (e.g. `git worktree add /tmp/before <commit>`)
on the same paths in the same rounds, so a change is measured against its parent side by side.

`--preload MODULES` also times this checkout with Ray's own preloaded workers on the local and
simulate paths (the address path's cluster is the operator's): `RAY_preload_python_modules=MODULES`
in the environment the nodes start from, so every worker the raylet starts imports them before it
takes work, and the raylet prestarts a node's CPU count of workers when the driver connects
(`prestart_worker_first_driver`, on by default). Issue 56 tried `torch,torchvision,timm`: not kept
(BENCHMARKS.md, startup).

    python bench/startup.py [--rounds 3] [--paths local,simulate,address] [--before DIR] [--preload MODULES]

Ends with `RESULT startup first_step_s=<x> ratio_vs_ray=<x> exit_after_last_step_s=<x>` for the
local path (the quick start's), then one line per other path; the goals: first step <= 15 s and
<= 1.0x Ray's, and an exit within 5 s plus the final validation.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from results_log import report_result  # bench/, this script's folder

ROOT = Path(__file__).resolve().parents[1]
STEPS = 20
CONFIG = ROOT / "configs" / "hetero.yaml"
TOKEN = "b" * 32


def environment(code: Path = ROOT) -> dict:
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "PYTHONPATH": str(code)}
    env.pop("RAY_ADDRESS", None)
    return env


def time_ours(code: Path, run_dir: Path, path: str, address: str | None, extra_env: dict | None = None) -> dict:
    """One job of `configs/hetero.yaml` on `path`, run from the smlaunch tree `code` (with `extra_env`)."""
    sets = ["--set", f"trainer.steps={STEPS}", "--set", f"run.dir={run_dir}", "--set", "run.name=r"]
    env = {**environment(code), **(extra_env or {})}
    if path == "simulate":
        args = ["simulate", str(CONFIG), *sets]
    elif path == "address":
        args = [str(CONFIG), "--address", address, *sets]
        env.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=TOKEN)
    else:
        args = [str(CONFIG), *sets]
    started = time.time()
    done = subprocess.run(
        [sys.executable, "-m", "smlaunch", *args], cwd=code, env=env, capture_output=True, text=True, timeout=600
    )
    ended = time.time()
    if done.returncode != 0:
        raise SystemExit(f"sm-launch ({path}, {code}) failed ({done.returncode}):\n{done.stderr[-3000:]}")
    summary = json.loads(next(run_dir.rglob("report.json")).read_text())["summary"]
    # The exit from the same start as the phases: the head host's own command (`simulate` starts it
    # a little after its own start); where an older checkout has no such field, this command's start.
    since = summary.get("command_started_at", started)
    return {**summary["phases_s"], "exit": round(ended - since, 2)}


def time_ray() -> dict:
    started = time.time()
    code = "import ray_reference_job as job; job.main()"
    env = {**environment(), "PYTHONPATH": str(ROOT / "bench")}  # Ray's workers import its functions by module
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    ended = time.time()
    if done.returncode != 0:
        raise SystemExit(f"the Ray reference job failed ({done.returncode}):\n{done.stderr[-3000:]}")
    marks = json.loads([line for line in done.stdout.splitlines() if line.startswith("{")][-1])
    return {**marks, "exit": round(ended - started, 2)}


@contextlib.contextmanager
def operator_cluster(tmp: Path):
    """`ray start` head (train labels, 1 CPU) and worker (data labels, 2 CPUs) on 127.0.0.1; stopped after."""
    sys.path.insert(0, str(ROOT))
    from smlaunch.cluster.rendezvous import free_port

    ray = str(Path(sys.executable).parent / "ray")
    port, temp = free_port(), tempfile.mkdtemp(prefix="smb-", dir="/tmp")  # socket paths under 108 bytes
    env = {**environment(), "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": TOKEN}
    common = ["--disable-usage-stats", "--block", "--object-store-memory=200000000"]
    nodes = [
        [
            "--head",
            f"--port={port}",
            "--node-ip-address=127.0.0.1",
            "--include-dashboard=false",
            f"--temp-dir={temp}",
            "--num-cpus=1",
            "--labels=ray-subcluster=train,sm-group=train_group",
        ],
        [f"--address=127.0.0.1:{port}", "--num-cpus=2", "--labels=ray-subcluster=data,sm-group=data_group"],
    ]
    procs = []
    try:
        for i, args in enumerate(nodes):
            log = tmp / f"node-{i}.log"
            procs.append(
                subprocess.Popen(
                    [ray, "start", *args, *common],
                    env=env,
                    stdout=log.open("wb"),
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            )
            deadline = time.monotonic() + 120
            while "Ray runtime started" not in log.read_text(errors="replace"):
                if time.monotonic() > deadline or procs[-1].poll() is not None:
                    raise SystemExit(f"ray start failed:\n{log.read_text()[-2000:]}")
                time.sleep(0.2)
        yield f"127.0.0.1:{port}"
    finally:
        for proc in reversed(procs):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
        shutil.rmtree(temp, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--paths",
        default="local,simulate,address",
        help="comma-separated, of local, simulate, address (default: all three)",
    )
    parser.add_argument("--before", type=Path, help="another smlaunch checkout to time in the same rounds")
    parser.add_argument(
        "--preload",
        metavar="MODULES",
        help="also time this checkout with RAY_preload_python_modules=MODULES (local, simulate)",
    )
    args = parser.parse_args()
    paths = [p for p in args.paths.split(",") if p]
    if not paths or set(paths) - {"local", "simulate", "address"}:
        parser.error(f"--paths: choose from local, simulate, address (got {args.paths!r})")
    trees = {
        "now": ROOT,
        **({"before": args.before.resolve()} if args.before else {}),
        **({"preload": ROOT} if args.preload else {}),
    }
    extra = {"preload": {"RAY_preload_python_modules": args.preload}} if args.preload else {}
    runs: dict[tuple[str, str], list[dict]] = {
        (t, p): [] for t in trees for p in paths if not (t == "preload" and p == "address")
    }
    ray: list[dict] = []
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
        address = stack.enter_context(operator_cluster(Path(tmp))) if "address" in paths else None
        for n in range(args.rounds):
            ray.append(time_ray())
            print(f"round {n + 1}: Ray alone: {json.dumps(ray[-1])}", flush=True)
            for path in paths:
                for tree, code in trees.items():
                    if (tree, path) not in runs:
                        continue
                    phases = time_ours(code, Path(tmp) / f"{tree}-{path}-{n}", path, address, extra.get(tree))
                    runs[tree, path].append(phases)
                    print(
                        f"  sm-launch {path} ({tree}): first step {phases['first_step']:.1f} s, last step "
                        f"{phases['last_step']:.1f} s, exit {phases['exit']:.1f} s: {json.dumps(phases)}",
                        flush=True,
                    )

    def median(rows, key):
        return statistics.median(r[key] for r in rows)

    theirs = median(ray, "first_step_s")
    print(
        f"median over {args.rounds} rounds ({os.cpu_count()} CPUs): Ray alone first step {theirs:.1f} s, "
        f"exit {median(ray, 'exit') - median(ray, 'last_step_s'):.1f} s after its last step (no validation)"
    )
    for (tree, path), rows in runs.items():
        print(
            f"  sm-launch {path} ({tree}): first step {median(rows, 'first_step'):.1f} s "
            f"({median(rows, 'first_step') / theirs:.2f}x Ray alone), train workers up "
            f"{median(rows, 'train_workers_up'):.1f} s, exit "
            f"{statistics.median(r['exit'] - r['last_step'] for r in rows):.1f} s after the last step"
        )
    for path in paths:
        rows = runs["now", path]
        first = median(rows, "first_step")
        after_last = statistics.median(r["exit"] - r["last_step"] for r in rows)
        validation = statistics.median(r["final_validation"] - r["last_step"] for r in rows)
        name = "startup" if path == "local" else f"startup_{path}"
        report_result(
            f"RESULT {name} first_step_s={first:.1f} ratio_vs_ray={first / theirs:.2f} "
            f"exit_after_last_step_s={after_last:.1f} goal=first_step_s<=15,ratio_vs_ray<=1.0,"
            f"exit_after_last_step_s<={5 + validation:.1f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
