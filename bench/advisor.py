"""Checks the offload advisor's prediction by running what it recommends (issue 8).

Round 1 runs a job whose chain is the bottleneck with one data host; the advisor reads the
report and predicts images/s for k = 0..N hosts of that type. Round 2 runs the same job with the
advisor's recommended k (capped at --max-hosts) and measures. The error is
|predicted - measured| / measured for that k.

The job is `configs/tiny.yaml` at 32 px with a chain that holds each CPU slot --chain-ms per image
(`bench/advisor_ops.py:hold`: simulated hosts share this machine's cores, so the chain's work is
a wait on the host's own slot, as real hosts do not slow each other), and the real CPU trainer.

    python bench/advisor.py [--chain-ms 8] [--steps 150] [--max-hosts 2]

Ends with `RESULT advisor error_pct=<x> goal=15`.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run_job(tmp: Path, name: str, hosts: int, args) -> dict:
    sets = [f"run.dir={tmp}", f"run.name={name}", f"cluster.instance_groups.1.instance_count={hosts}",
            f"trainer.steps={args.steps}", "trainer.checkpoint_interval=0", "trainer.validation_every_epochs=0",
            "pipeline.ops.1.size=32",
            f"pipeline.ops.2={{op: user, function: 'advisor_ops:hold', params: {{ms: {args.chain_ms}}}}}"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT / "bench"), os.environ.get("PYTHONPATH")]))}
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "smlaunch.launcher.cli", str(ROOT / "configs" / "tiny.yaml"),
                    *[x for s in sets for x in ("--set", s)]], check=True, env=env,
                   stdout=subprocess.DEVNULL if not args.verbose else None)
    report = json.loads(next((tmp / name).glob("hosts/algo-1/opt/ml/output/data/report.json")).read_text())
    print(f"{name}: {hosts} data host{'' if hosts == 1 else 's'}, {report['summary']['images_per_s']} images/s, "
          f"data wait {report['summary']['data_wait_pct']} %, verdict {report['verdict']['verdict']}, "
          f"{time.perf_counter() - started:.0f} s", flush=True)
    return report


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chain-ms", type=float, default=8.0, help="ms each image holds a chain slot")
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--max-hosts", type=int, default=2,
                        help="cap on the hosts of round 2: simulated hosts share this machine's cores")
    parser.add_argument("--verbose", action="store_true")
    parser.add_argument("--keep", help="keep the runs in this directory (default: a temporary one)")
    args = parser.parse_args()
    from smlaunch.launcher.advisor import advice_lines

    with tempfile.TemporaryDirectory(dir=args.keep) as tmp:
        first = run_job(Path(tmp), "measure", 1, args)
        advisor = first["advisor"]
        for line in advice_lines(advisor):
            print(line)
        print("predicted, k hosts of", advisor["table_instance_type"], ":",
              ", ".join(f"k={o['hosts']}: {o['images_per_s']}" for o in advisor["table"][:args.max_hosts + 1]))
        k = min(advisor["recommended_same_type"]["hosts"], args.max_hosts)
        predicted = advisor["table"][k]["images_per_s"]
        second = run_job(Path(tmp), f"check-{k}", k, args)
        if args.keep:
            os.rename(tmp, Path(args.keep) / f"advisor-{time.strftime('%Y%m%d-%H%M%S')}")
            os.mkdir(tmp)
    measured = second["summary"]["images_per_s"]
    error = 100 * abs(predicted - measured) / measured
    print(f"recommended k={advisor['recommended_same_type']['hosts']} (run with k={k}): predicted {predicted} "
          f"images/s, measured {measured} images/s")
    print(f"RESULT advisor error_pct={error:.1f} goal=15")
    return 0


if __name__ == "__main__":
    sys.exit(main())
