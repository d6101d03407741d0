"""The recipe's cost (issue 78): the same job through the loop with every recipe feature on vs the
loop as it was before them.

- **before**: the commit before issue 78 (`--base`, default 4268b2c), checked out in a git worktree:
  its loop stepped the optimizer and the schedule, and validated with per-batch means.
- **recipe**: this checkout, the same job with the recipe on: `trainer.clip_grad_norm`, the gradient
  norm on every step line, `trainer.ema`, `trainer.keep_best`, `trainer.early_stop` (patience longer
  than the run), a user's callback on every event, and torchmetrics accuracy/top-5 for validation.

Each is a whole `sm-launch` job on configs/tiny.yaml (three simulated hosts, one CPU train worker), run
from a folder of its own; the rate is report.json's `images_per_s` (the steady steps' rate: start-up
and validation are not in it). The two alternate for `--rounds` rounds and each side's rates are
averaged: a small shared machine drifts by tens of percent from minute to minute.

    python bench/recipe.py [--steps 300] [--rounds 2] [--base 4268b2c]

Ends with `RESULT recipe images_per_s_ratio=<recipe over before> goal=0.95`.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from results_log import report_result  # bench/, this script's folder

ROOT = Path(__file__).resolve().parents[1]

CALLBACK = '''
class Counting:
    """A user's callback on every event: what a tracker or a profiler would hook."""

    def __init__(self):
        self.calls = 0

    def on_train_start(self, run):
        self.calls += 1

    def on_step_end(self, run, outcome):
        self.calls += 1

    def on_log(self, run, record):
        self.calls += 1

    def on_epoch_end(self, run):
        self.calls += 1

    def on_validation_end(self, run, metrics):
        self.calls += 1

    def on_train_end(self, run):
        self.calls += 1
'''

RECIPE = [
    "trainer.clip_grad_norm=1.0",
    "trainer.ema.decay=0.999",
    "trainer.keep_best.metric=accuracy",
    "trainer.keep_best.mode=max",
    "trainer.early_stop.metric=loss",
    "trainer.early_stop.patience=1000",
    "trainer.callbacks=[bench_callbacks:Counting]",
]


def run_job(source: Path, folder: Path, name: str, steps: int, recipe: bool) -> float:
    """One job from `folder` with the smlaunch in `source`; its steady images/s."""
    sets = [f"trainer.steps={steps}", f"run.dir={folder / 'runs'}", f"run.name={name}", "trainer.resume=false"]
    sets += RECIPE if recipe else []
    env = {**os.environ, "PYTHONPATH": str(source)}  # the checkout under test, before the installed one
    command = [sys.executable, "-m", "smlaunch.launcher.cli", "-q", "run", str(ROOT / "configs" / "tiny.yaml")]
    for item in sets:
        command += ["--set", item]
    done = subprocess.run(command, cwd=folder, env=env, capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        raise SystemExit(f"{name} failed ({done.returncode}):\n{(done.stdout + done.stderr)[-3000:]}")
    report = json.loads((folder / "runs" / name / "hosts/algo-1/opt/ml/output/data/report.json").read_text())
    rate = report["summary"]["images_per_s"]
    # Each side ran the code it names: only the recipe's loop prints a gradient norm and keeps a best.
    assert ("grad_norm" in report["steps"][-1]) == recipe, (name, report["steps"][-1])
    assert (report["summary"].get("best") is not None) == recipe, (name, report["summary"])
    print(f"{name}: {rate:.1f} images/s ({report['summary']['steps']} steps)", flush=True)
    return rate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--base", default="4268b2c", help="the commit of the loop before the recipe")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="smlaunch-bench-recipe-") as tmp:
        base = Path(tmp) / "base"
        subprocess.run(
            ["git", "-C", str(ROOT), "worktree", "add", "--detach", str(base), args.base],
            check=True,
            capture_output=True,
        )
        try:
            folder = Path(tmp) / "job"
            folder.mkdir()
            (folder / "bench_callbacks.py").write_text(CALLBACK)
            before, recipe = [], []
            for i in range(args.rounds):
                before.append(run_job(base, folder, f"before-{i}", args.steps, recipe=False))
                recipe.append(run_job(ROOT, folder, f"recipe-{i}", args.steps, recipe=True))
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(base)], capture_output=True)
    mean_before, mean_recipe = sum(before) / len(before), sum(recipe) / len(recipe)
    print(f"before {mean_before:.1f} images/s, recipe {mean_recipe:.1f} images/s over {args.rounds} rounds each")
    report_result(f"RESULT recipe images_per_s_ratio={mean_recipe / mean_before:.3f} goal=0.95")


if __name__ == "__main__":
    main()
