"""Data wait at epoch boundaries: the main job's config, and where its waiting happens (issue 22).

Runs `sm-launch configs/hetero.yaml` (the `make run` job: one train host, one data host, the
builtin digits, 300 steps of about 22 per epoch) and reads the per-step records of its report. A
step "right after a boundary" is the first step of every epoch after the first; its data wait is
the trainer's wait for the new epoch's first batch (the previous epoch's last batches, the
validation pass between epochs and the new execution's start all land there).

Prints the waits by position (first step of the job, first steps of epochs, the rest) and how
much of the run's waiting each holds, then

    RESULT epoch_boundary data_wait_pct=<x> boundary_wait_ratio=<y> goal=2/...

`data_wait_pct` is the report's (all steps); `boundary_wait_ratio` is the mean wait of the steps
right after a boundary over the median step's wait (1.0: a boundary costs nothing extra).

    python bench/epoch_boundary.py [--config configs/hetero.yaml] [--steps 300] [--set key=value ...]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from results_log import report_result  # bench/, this script's folder

ROOT = Path(__file__).resolve().parents[1]


def boundary_figures(steps: list[dict]) -> dict:
    """Waits by position in the run, from a report's step records."""
    waits = [s["data_wait_s"] for s in steps]
    firsts = [i for i in range(1, len(steps)) if steps[i]["epoch"] != steps[i - 1]["epoch"]]
    after = [waits[i] for i in firsts]
    rest = [w for i, w in enumerate(waits) if i and i not in set(firsts)]
    median = statistics.median(waits[1:]) if len(waits) > 1 else 0.0
    total = sum(waits) or 1e-12
    return {
        "steps": len(steps),
        "boundaries": len(firsts),
        "first_step_wait_s": waits[0] if waits else 0.0,
        "boundary_wait_s_mean": statistics.fmean(after) if after else 0.0,
        "median_wait_s": median,
        "other_wait_s_mean": statistics.fmean(rest) if rest else 0.0,
        "share_first_step": waits[0] / total if waits else 0.0,
        "share_boundaries": sum(after) / total,
        "share_rest": sum(rest) / total,
        "boundary_wait_ratio": (statistics.fmean(after) / median) if after and median > 0 else float("inf"),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default=str(ROOT / "configs" / "hetero.yaml"))
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--set", action="append", default=[], help="more config overrides")
    parser.add_argument("--report", help="read this report.json instead of running the job")
    args = parser.parse_args()
    if args.report:
        report = json.loads(Path(args.report).read_text())
    else:
        with tempfile.TemporaryDirectory() as tmp:
            sets = [f"run.dir={tmp}", "run.name=boundary", f"trainer.steps={args.steps}", *args.set]
            started = time.perf_counter()
            subprocess.run(
                [sys.executable, "-m", "smlaunch.launcher.cli", args.config, *[x for s in sets for x in ("--set", s)]],
                check=True,
                stdout=subprocess.DEVNULL,
            )
            print(f"job: {args.config}, {args.steps} steps, {time.perf_counter() - started:.0f} s", flush=True)
            report = json.loads(
                next(Path(tmp).glob("boundary/hosts/algo-1/opt/ml/output/data/report.json")).read_text()
            )
    f = boundary_figures(report["steps"])
    summary = report["summary"]
    print(f"{f['steps']} steps, {f['boundaries']} epoch boundaries; images/s {summary['images_per_s']}")
    print(
        f"data wait: first step {f['first_step_wait_s']:.2f} s ({100 * f['share_first_step']:.0f} % of all waiting), "
        f"first steps of epochs {f['boundary_wait_s_mean']:.3f} s mean ({100 * f['share_boundaries']:.0f} %), "
        f"other steps {f['other_wait_s_mean']:.4f} s mean ({100 * f['share_rest']:.0f} %), median "
        f"{f['median_wait_s']:.4f} s"
    )
    report_result(
        f"RESULT epoch_boundary data_wait_pct={summary['data_wait_pct']:.1f} "
        f"boundary_wait_ratio={f['boundary_wait_ratio']:.1f} goal=2/-"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
