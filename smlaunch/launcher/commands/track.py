"""`sm-launch track --replay RUN_DIR`: send what a run tracked to its MLflow run afterwards
(`launcher.tracking.replay`): for a job whose store was down, or that stopped before it drained."""

from __future__ import annotations

import logging

from smlaunch.console import RESULT

log = logging.getLogger("smlaunch")


def add_arguments(parser) -> None:
    parser.add_argument(
        "--replay",
        metavar="RUN_DIR",
        required=True,
        help="a run directory, a job's output/data folder, or its tracking/journal.jsonl",
    )
    parser.add_argument("--uri", help="send to this store instead of the one the run named (tracking.mlflow.uri)")


def main(args, failure) -> int:
    from smlaunch.launcher.tracking.replay import replay

    sent = replay(args.replay, args.uri)
    log.log(
        RESULT,
        f"track: MLflow run {sent['run_id']} at {sent['uri']}: {sent['points']} points sent, {sent['skipped']} "
        f"already there; status {sent['status']}",
    )
    return 0
