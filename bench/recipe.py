"""The recipe's cost (issue 78): the same job through the loop with every recipe feature on vs the
loop as it was before them.

- **before**: the commit before issue 78 (`--base`, default 4268b2c), checked out in a git worktree:
  its loop stepped the optimizer and the schedule, and validated with per-batch means.
- **recipe**: this checkout, the same job through the recipe's machinery, which every run now pays
  for: the gradient norm on every step line, the step's post-hook, the callbacks on every event
  (`trainer.keep_best`, `trainer.early_stop` with a patience longer than the run, a user's callback on
  every event), and torchmetrics accuracy/top-5 for validation. Clipping and EMA are opt-in extra
  passes over the weights; their cost is `step_ratio_clip_ema`.

Each is a whole `sm-launch` job on configs/tiny.yaml (three simulated hosts, one CPU train worker), run
from a folder of its own; the rate is report.json's `images_per_s` (the steady steps' rate: start-up
and validation are not in it). The two alternate for `--rounds` rounds, in ABBA order (which side
goes first swaps each round, and each job starts `PAUSE_S` after the last one ended: a job's Ray
processes take seconds to go, and a run that follows overlaps them), and the ratio is of each side's
median: a small shared machine drifts by tens of percent from minute to minute, and the simulated data
hosts share its cores, so `compute_ratio` also gives the rate with the data wait taken out
(`images_per_s / (1 - data_wait_pct / 100)`).

The job's rate moves by more than the recipe's cost, so the step itself is timed too, in one process
(`step_ratio`): the same timm model (resnet10t, 32 px, batch 32) and batch, a plain
`optimizer.step(); schedule.step()` against `Recipe.step()` with the gradient norm read and the
callbacks' `on_step_end`, in alternating blocks, the median block's steps/s; `step_ratio_clip_ema`
with `trainer.clip_grad_norm` and `trainer.ema` on as well.

    python bench/recipe.py [--steps 1200] [--rounds 4] [--base 4268b2c]

Ends with `RESULT recipe images_per_s_ratio=<recipe over before> compute_ratio=<...> step_ratio=<...>
step_ratio_clip_ema=<...> goal=0.95`.
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

from results_log import report_result  # bench/, this script's folder

ROOT = Path(__file__).resolve().parents[1]
PAUSE_S = 15

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
    "trainer.keep_best.metric=accuracy",
    "trainer.keep_best.mode=max",
    "trainer.early_stop.metric=loss",
    "trainer.early_stop.patience=1000",
    "trainer.callbacks=[bench_callbacks:Counting]",
]


def run_job(source: Path, folder: Path, name: str, steps: int, recipe: bool) -> tuple[float, float]:
    """One job from `folder` with the smlaunch in `source`; its steady images/s, and without data wait."""
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
    rate, wait = report["summary"]["images_per_s"], report["summary"]["data_wait_pct"]
    # Each side ran the code it names: only the recipe's loop prints a gradient norm and keeps a best.
    assert ("grad_norm" in report["steps"][-1]) == recipe, (name, report["steps"][-1])
    assert (report["summary"].get("best") is not None) == recipe, (name, report["summary"])
    print(f"{name}: {rate:.1f} images/s, data wait {wait:.1f} % ({report['summary']['steps']} steps)", flush=True)
    return rate, rate / max(1e-9, 1 - wait / 100)


def step_ratio(blocks: int = 7, steps: int = 30, **keys) -> float:
    """Recipe.step (the norm read, the callbacks; `keys`: trainer keys on top) over a plain optimizer
    and schedule step: the median block's steps/s, the same model and batch, alternating."""
    from types import SimpleNamespace

    import torch

    from smlaunch.config.schema import TrainerConfig
    from smlaunch.trainers.callbacks import Callbacks, RunView
    from smlaunch.trainers.model import create_model
    from smlaunch.trainers.optim import adamw, warmup_cosine_schedule
    from smlaunch.trainers.recipe import Recipe

    torch.manual_seed(0)
    cpu = torch.device("cpu")
    x, y = torch.randn(32, 3, 32, 32), torch.randint(0, 10, (32,))
    trainer = TrainerConfig(steps=10_000, **keys)
    spec = SimpleNamespace(trainer=trainer, learning_rate=1e-3, total_steps=10_000, optimizer=None, schedule=None)
    plain_model, recipe_model = create_model("resnet10t", 10, 32), create_model("resnet10t", 10, 32)
    optimizer = adamw(plain_model, 1e-3, 0.05)
    schedule = warmup_cosine_schedule(optimizer, 10_000)
    recipe = Recipe(recipe_model, spec, cpu, "fp32")
    callbacks = Callbacks(trainer, (), (CALLBACK_OBJECT,))
    run = SimpleNamespace(step=0, epochs_done=0, rank=0, world=1, recipe=recipe, stop_request=None)

    def plain_block() -> float:
        start = time.perf_counter()
        for _ in range(steps):
            torch.nn.functional.cross_entropy(plain_model(x), y).backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            schedule.step()
        return steps / (time.perf_counter() - start)

    def recipe_block() -> float:
        start = time.perf_counter()
        for _ in range(steps):
            recipe.backward(torch.nn.functional.cross_entropy(recipe_model(x), y))
            outcome = recipe.step()
            float(outcome.grad_norm)
            run.step += 1
            callbacks.fire("on_step_end", RunView(run), outcome)
        return steps / (time.perf_counter() - start)

    plain_block(), recipe_block()  # warm-up
    plain, with_recipe = [], []
    for _ in range(blocks):
        plain.append(plain_block())
        with_recipe.append(recipe_block())
    ratio = statistics.median(with_recipe) / statistics.median(plain)
    print(
        f"step {keys or ''}: plain {statistics.median(plain):.2f} steps/s, "
        f"recipe {statistics.median(with_recipe):.2f} steps/s"
    )
    return ratio


class _Noop:
    def on_step_end(self, run, outcome):
        pass


CALLBACK_OBJECT = _Noop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=1200)
    parser.add_argument("--rounds", type=int, default=4)
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
                for side in ("before", "recipe") if i % 2 == 0 else ("recipe", "before"):
                    time.sleep(PAUSE_S)
                    if side == "before":
                        before.append(run_job(base, folder, f"before-{i}", args.steps, recipe=False))
                    else:
                        recipe.append(run_job(ROOT, folder, f"recipe-{i}", args.steps, recipe=True))
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(base)], capture_output=True)
    rate_before, rate_recipe = (statistics.median(r for r, _ in side) for side in (before, recipe))
    compute_before, compute_recipe = (statistics.median(c for _, c in side) for side in (before, recipe))
    print(f"median over {args.rounds} rounds: before {rate_before:.1f} images/s, recipe {rate_recipe:.1f} images/s")
    steps, extra = step_ratio(), step_ratio(clip_grad_norm=1.0, ema={"decay": 0.999})
    report_result(
        f"RESULT recipe images_per_s_ratio={rate_recipe / rate_before:.3f} "
        f"compute_ratio={compute_recipe / compute_before:.3f} step_ratio={steps:.3f} "
        f"step_ratio_clip_ema={extra:.3f} goal=0.95"
    )


if __name__ == "__main__":
    main()
