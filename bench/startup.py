"""Time to first step: `sm-launch configs/hetero.yaml` against the same job written with Ray alone.

Side by side on this machine, taking turns, `--rounds` of each (median):

- **sm-launch**: `sm-launch configs/hetero.yaml --set trainer.steps=20` in a fresh process, as a user
  types it. Its report's phases (`launcher.job.phases`: seconds after the command) give the first
  and last steps; the process's end gives the exit.
- **ray**: `bench/ray_reference_job.py`, configs/hetero.yaml's shape as Ray's docs write it (two
  labelled local nodes, a `map_batches` PNG decode pinned to the data node, a `TorchTrainer` with
  one CPU worker building resnet10t), in a fresh process, timed the same way.

    python bench/startup.py [--rounds 3]

Ends with `RESULT startup first_step_s=<x> ratio_vs_ray=<x> exit_after_last_step_s=<x>`; the goals:
first step <= 15 s and <= 1.0x Ray's, and an exit within 5 s plus the final validation.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STEPS = 20


def environment() -> dict:
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "PYTHONPATH": str(ROOT)}
    env.pop("RAY_ADDRESS", None)
    return env


def time_ours(tmp: Path, n: int) -> dict:
    run_dir = tmp / f"ours{n}"
    started = time.time()
    done = subprocess.run([sys.executable, "-m", "smlaunch", str(ROOT / "configs" / "hetero.yaml"),
                           "--set", f"trainer.steps={STEPS}", "--set", f"run.dir={run_dir}", "--set", "run.name=r"],
                          env=environment(), capture_output=True, text=True, timeout=600)
    ended = time.time()
    if done.returncode != 0:
        raise SystemExit(f"sm-launch failed ({done.returncode}):\n{done.stderr[-3000:]}")
    report = json.loads(next(run_dir.rglob("report.json")).read_text())
    phases = report["summary"]["phases_s"]
    return {**phases, "exit": round(ended - started, 2)}


def time_ray(n: int) -> dict:
    started = time.time()
    code = "import ray_reference_job as job; job.main()"
    env = {**environment(), "PYTHONPATH": str(ROOT / "bench")}  # Ray's workers import its functions by module
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=600)
    ended = time.time()
    if done.returncode != 0:
        raise SystemExit(f"the Ray reference job failed ({done.returncode}):\n{done.stderr[-3000:]}")
    marks = json.loads([line for line in done.stdout.splitlines() if line.startswith("{")][-1])
    return {**marks, "exit": round(ended - started, 2)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    ours, ray = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for n in range(args.rounds):
            ray.append(time_ray(n))
            ours.append(time_ours(Path(tmp), n))
            print(f"round {n + 1}: sm-launch first step {ours[-1]['first_step']:.1f} s, last step "
                  f"{ours[-1]['last_step']:.1f} s, exit {ours[-1]['exit']:.1f} s; Ray first batch "
                  f"{ray[-1]['first_batch_s']:.1f} s, first step {ray[-1]['first_step_s']:.1f} s, exit "
                  f"{ray[-1]['exit']:.1f} s", flush=True)
            print(f"  sm-launch phases: {json.dumps(ours[-1])}", flush=True)
            print(f"  Ray alone: {json.dumps(ray[-1])}", flush=True)

    def median(runs, key):
        return statistics.median(r[key] for r in runs)

    first, theirs = median(ours, "first_step"), median(ray, "first_step_s")
    after_last = statistics.median(r["exit"] - r["last_step"] for r in ours)
    validation = statistics.median(r["final_validation"] - r["last_step"] for r in ours)
    print(f"median over {args.rounds} rounds: sm-launch first step {first:.1f} s, Ray alone {theirs:.1f} s; "
          f"sm-launch exits {after_last:.1f} s after its last step, {validation:.1f} s of it the final validation "
          f"(Ray alone: {statistics.median(r['exit'] - r['last_step_s'] for r in ray):.1f} s, no validation); "
          f"{os.cpu_count()} CPUs")
    print(f"RESULT startup first_step_s={first:.1f} ratio_vs_ray={first / theirs:.2f} "
          f"exit_after_last_step_s={after_last:.1f} goal=first_step_s<=15,ratio_vs_ray<=1.0,"
          f"exit_after_last_step_s<={5 + validation:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
