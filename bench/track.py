"""The same job tracked in MLflow and untracked, side by side (issue 81).

`sm-launch configs/tiny.yaml` (the local simulated cluster: a train host of two CPU stand-in ranks,
two data hosts) runs `--rounds` times each way, taking turns (untracked, tracked, tracked,
untracked, ...), each in a fresh process:

- **tracked**: `tracking.mlflow.uri` a SQLite store in the bench's folder, and `trainer.log_every: 1`,
  so every step's numbers go to the store (the default logs every 10th): the most tracking can cost;
- **untracked**: no `tracking:`.

Each run's steady images/s is the report's (`summary.images_per_s`: the steps after the warm-up,
both ranks). The ratio is the median over the rounds of tracked over untracked in the same round.
Each tracked run is checked to be one FINISHED run with a loss point for every step.

Then what grows with a run's steps: a journal of `--journal-steps` logged steps (8 metrics each, as a
built-in step record gives) sent by `sm-launch track --replay` to a fresh SQLite store, and sent again
(every point already there, nothing sent): seconds and points/s, from which a long run's replay is
estimated (1M steps at the default `log_every: 10` are 100,000 logged steps).
Ends with `RESULT track images_per_s_ratio=<tracked/untracked> replay_points_per_s=<...>
goal=images_per_s_ratio>=0.98`.

    python bench/track.py [--rounds 3] [--steps 400] [--journal-steps 20000]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from results_log import report_result  # bench/, this script's folder

ROOT = Path(__file__).resolve().parents[1]


def run(tmp: Path, name: str, steps: int, tracked: bool) -> float:
    sets = [f"run.dir={tmp}", f"run.name={name}", f"trainer.steps={steps}", "trainer.log_every=1"]
    if tracked:
        sets.append(f"tracking.mlflow={{uri: {tmp / 'mlflow.db'}, experiment: bench, run_name: {name}}}")
    args = [sys.executable, "-m", "smlaunch", str(ROOT / "configs" / "tiny.yaml")]
    for item in sets:
        args += ["--set", item]
    done = subprocess.run(args, capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        raise SystemExit(f"{name}: exit {done.returncode}\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    report = json.loads((tmp / name / "hosts" / "algo-1" / "opt/ml/output/data/report.json").read_text())
    if tracked:
        check(tmp / "mlflow.db", name, steps)
    return report["summary"]["images_per_s"]


def check(store: Path, name: str, steps: int) -> None:
    from mlflow import MlflowClient

    client = MlflowClient(f"sqlite:///{store}")
    experiment = client.get_experiment_by_name("bench").experiment_id
    (found,) = client.search_runs([experiment], filter_string=f"attributes.run_name = '{name}'")
    points = client.get_metric_history(found.info.run_id, "loss")
    if found.info.status != "FINISHED" or [p.step for p in points] != list(range(1, steps + 1)):
        raise SystemExit(f"{name}: run {found.info.status}, loss at {len(points)} steps of {steps}")


def replay_bench(tmp: Path, steps: int) -> tuple[float, float, int]:
    """Seconds to send a journal of `steps` logged steps to a fresh store, then to send it again."""
    import time

    from smlaunch.launcher.tracking.replay import replay

    folder = tmp / "journal" / "tracking"
    folder.mkdir(parents=True)
    keys = ("loss", "lr", "grad_norm", "images_per_sec", "data_wait_pct", "mae", "lr_head", "lr_body")
    with open(folder / "journal.jsonl", "w") as out:
        out.write(json.dumps({"kind": "start", "uri": "unused.db", "experiment": "replay", "run_name": "long"}) + "\n")
        out.write(json.dumps({"kind": "params", "params": {"trainer.steps": str(steps * 10)}, "tags": {}}) + "\n")
        for step in range(1, steps + 1):
            out.write(json.dumps({"kind": "points", "points": [[k, 1.0 / step, step * 10] for k in keys]}) + "\n")
        out.write(json.dumps({"kind": "end", "status": "FINISHED"}) + "\n")
    uri = str(tmp / "replay.db")
    started = time.perf_counter()
    sent = replay(str(folder.parent), uri)
    first = time.perf_counter() - started
    started = time.perf_counter()
    again = replay(str(folder.parent), uri)
    second = time.perf_counter() - started
    if sent["points"] != steps * len(keys) or again["points"] != 0:
        raise SystemExit(f"replay sent {sent['points']} then {again['points']} points of {steps * len(keys)}")
    return first, second, sent["points"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--journal-steps", type=int, default=20_000)
    args = parser.parse_args()
    ratios = []
    with tempfile.TemporaryDirectory(prefix="smlaunch-track-bench-") as work:
        tmp = Path(work)
        for n in range(args.rounds):
            order = (False, True) if n % 2 == 0 else (True, False)
            rates = {tracked: run(tmp, f"r{n}-{'on' if tracked else 'off'}", args.steps, tracked) for tracked in order}
            ratios.append(rates[True] / rates[False])
            print(
                f"round {n + 1}: untracked {rates[False]:.1f} images/s, tracked {rates[True]:.1f} ({ratios[-1]:.3f})",
                flush=True,
            )
        first, second, points = replay_bench(tmp, args.journal_steps)
    rate = points / first
    print(
        f"replay: {args.journal_steps} logged steps, {points} points to a fresh SQLite store in {first:.1f} s "
        f"({rate:.0f} points/s); sent again (all there already) in {second:.1f} s; at this rate a run of 1M "
        f"steps at log_every 10 (800,000 points) replays in {800_000 / rate / 60:.1f} min",
        flush=True,
    )
    report_result(
        f"RESULT track images_per_s_ratio={statistics.median(ratios):.3f} replay_points_per_s={rate:.0f} "
        "goal=images_per_s_ratio>=0.98"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
