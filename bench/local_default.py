"""End-to-end throughput of the local default job (`sm-launch configs/hetero.yaml`).

Runs the real CLI in a fresh process, reads the run report, and prints the steady-state images/s
of the trainer beside the two things that explain it: the share of step time spent waiting for
data, and the wall-clock split between cluster start-up and training.

    python bench/local_default.py [--set KEY=VALUE ...]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from results_log import report_result  # bench/, this script's folder

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        sets = [x for o in args.overrides for x in ("--set", o)]
        started = time.perf_counter()
        subprocess.run(
            [
                sys.executable,
                "-m",
                "smlaunch.launcher.cli",
                str(ROOT / "configs" / "hetero.yaml"),
                "--set",
                f"run.dir={tmp}",
                "--set",
                "run.name=bench",
                *sets,
            ],
            check=True,
        )
        wall = time.perf_counter() - started
        report = json.loads((Path(tmp) / "bench/hosts/algo-1/opt/ml/output/data/report.json").read_text())
    s = report["summary"]
    print(
        f"steps={s['steps']} validation_accuracy={s['validation_accuracy']} "
        f"data_node_row_fraction={s['data_node_row_fraction']}"
    )
    print(
        f"data_wait_pct={s['data_wait_pct']} cluster_start_s={s['cluster_start_s']} "
        f"train_s={s['train_s']} process_wall_s={wall:.1f}"
    )
    report_result(f"RESULT local_default images_per_s={s['images_per_s']} goal=none")
    return 0


if __name__ == "__main__":
    sys.exit(main())
