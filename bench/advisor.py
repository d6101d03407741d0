"""Checks the offload advisor's prediction by running what it recommends (issue 8).

Round 1 runs a job whose chain is the bottleneck with one data host; the advisor reads the
report and predicts images/s for k = 0..N hosts of that type. Round 2 runs the same job with the
advisor's recommended k (capped at --max-hosts) and measures. The error is
|predicted - measured| / measured for that k.

The job is `configs/tiny.yaml` at 32 px with a chain that holds each CPU slot --chain-ms per image
(`bench/advisor_ops.py:hold`: simulated hosts share this machine's cores, so the chain's work is
a wait on the host's own slot, as real hosts do not slow each other), and the real CPU trainer.

Each train-worker count of `--workers` (default 1 and 2: CPU stand-ins for the GPU host's GPUs,
DDP over gloo) is checked the same way: the advisor predicts for the run's own worker count.

    python bench/advisor.py [--chain-ms 8] [--steps 150] [--max-hosts 2] [--workers 1 2]

Ends with `RESULT advisor error_pct=<x, first count> error_pct_2_workers=<y> goal=15`.
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

from results_log import report_result  # bench/, this script's folder

ROOT = Path(__file__).resolve().parents[1]


def run_job(tmp: Path, name: str, hosts: int, args, workers: int) -> dict:
    sets = [
        f"run.dir={tmp}",
        f"run.name={name}",
        f"cluster.instance_groups.1.instance_count={hosts}",
        f"cluster.instance_groups.0.gpus={workers}",
        f"trainer.steps={args.steps}",
        "trainer.checkpoint_interval=0",
        "trainer.validation_every_epochs=0",
        "pipeline.ops.1.size=32",
        f"pipeline.ops.2={{op: user, function: 'advisor_ops:hold', params: {{ms: {args.chain_ms}}}}}",
    ]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT / "bench"), os.environ.get("PYTHONPATH")])),
    }
    started = time.perf_counter()
    subprocess.run(
        [
            sys.executable,
            "-m",
            "smlaunch.launcher.cli",
            str(ROOT / "configs" / "tiny.yaml"),
            *[x for s in sets for x in ("--set", s)],
        ],
        check=True,
        env=env,
        stdout=subprocess.DEVNULL if not args.verbose else None,
    )
    report = json.loads(next((tmp / name).glob("hosts/algo-1/opt/ml/output/data/report.json")).read_text())
    print(
        f"{name}: {workers} train worker{'' if workers == 1 else 's'}, {hosts} data host{'' if hosts == 1 else 's'}, "
        f"{report['summary']['images_per_s']} images/s, "
        f"data wait {report['summary']['data_wait_pct']} %, verdict {report['verdict']['verdict']}, "
        f"{time.perf_counter() - started:.0f} s",
        flush=True,
    )
    return report


def check(tmp: Path, args, workers: int) -> float:
    """Round 1 with one data host, round 2 with the advisor's recommended k (capped); the error %."""
    from smlaunch.launcher.report.advisor import advice_lines

    first = run_job(tmp, f"measure-w{workers}", 1, args, workers)
    advisor = first["advisor"]
    for line in advice_lines(advisor):
        print(line)
    print(
        "predicted, k hosts of",
        advisor["table_instance_type"],
        ":",
        ", ".join(f"k={o['hosts']}: {o['images_per_s']}" for o in advisor["table"][: args.max_hosts + 1]),
    )
    k = min(advisor["recommended_same_type"]["hosts"], args.max_hosts)
    predicted = advisor["table"][k]["images_per_s"]
    second = run_job(tmp, f"check-w{workers}-k{k}", k, args, workers)
    measured = second["summary"]["images_per_s"]
    error = 100 * abs(predicted - measured) / measured
    print(
        f"{workers} worker(s): recommended k={advisor['recommended_same_type']['hosts']} (run with k={k}): "
        f"predicted {predicted} images/s, measured {measured} images/s, error {error:.1f} %",
        flush=True,
    )
    return error


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chain-ms", type=float, default=8.0, help="ms each image holds a chain slot")
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument(
        "--max-hosts",
        type=int,
        default=2,
        help="cap on the hosts of round 2: simulated hosts share this machine's cores",
    )
    parser.add_argument(
        "--workers",
        type=int,
        nargs="+",
        default=[1, 2],
        help="train workers (CPU stand-ins for GPUs on the GPU host); each count is checked",
    )
    parser.add_argument("--verbose", action="store_true")
    parser.add_argument("--keep", help="keep the runs in this directory (default: a temporary one)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.keep) as tmp:
        errors = {w: check(Path(tmp), args, w) for w in args.workers}
        if args.keep:
            os.rename(tmp, Path(args.keep) / f"advisor-{time.strftime('%Y%m%d-%H%M%S')}")
            os.mkdir(tmp)
    first, *rest = errors.items()
    extra = "".join(f" error_pct_{w}_workers={e:.1f}" for w, e in rest)
    report_result(f"RESULT advisor error_pct={first[1]:.1f}{extra} goal=15")
    return 0


if __name__ == "__main__":
    sys.exit(main())
