"""`sm-launch agent --channel C --source DIR|s3://B/P|MANIFEST ...`: SageMaker's Pipe-mode agent,
for any Pipe-mode program on a laptop.

For each epoch it creates the FIFO `<data-dir>/<channel>_<epoch>`, waits (bounded) for a reader and
streams the channel's objects into it, as `smlaunch.pipelines.sources.pipe_agent.PipeAgent` documents. The
console shows the bytes streamed per epoch (a bar on a terminal, a line every 30 s otherwise).
"""

from __future__ import annotations

import logging
import threading

from smlaunch.console import Progress
from smlaunch.text import plural

log = logging.getLogger("smlaunch")


def add_arguments(parser) -> None:
    parser.add_argument("--channel", required=True)
    parser.add_argument(
        "--source",
        required=True,
        help="a folder, or s3://bucket/prefix (set AWS_ENDPOINT_URL for "
        "a local S3 server), or an augmented manifest with --attribute-names",
    )
    parser.add_argument("--data-dir", default="/opt/ml/input/data", help="where the FIFOs go (default %(default)s)")
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--seed", type=int, help="shuffle the objects per epoch with this seed (ShuffleConfig)")
    parser.add_argument("--record-wrapper", choices=("None", "RecordIO"), default="None")
    parser.add_argument("--shard", metavar="I/N", help="ShardedByS3Key: this host's share, host I of N (0-based)")
    parser.add_argument(
        "--attribute-names",
        metavar="A,B",
        help="--source is an augmented manifest (JSON Lines): "
        "stream one RecordIO record per named attribute per line, `-ref` ones as the object's bytes",
    )
    parser.add_argument(
        "--reader-wait",
        type=float,
        default=120.0,
        metavar="S",
        help="seconds to wait for a reader to open each FIFO (default %(default)s)",
    )


def main(args, failure) -> int:
    from smlaunch.errors import UserError
    from smlaunch.pipelines.sources.objects import local_objects, objects_for_host, s3_objects
    from smlaunch.pipelines.sources.pipe_agent import PipeAgent

    if args.attribute_names:
        from smlaunch.pipelines.sources.manifest import manifest_objects
        from smlaunch.pipelines.sources.objects import ObjectSource

        objects = manifest_objects(ObjectSource(args.source), args.attribute_names.split(","))
    else:
        objects = s3_objects(args.source) if args.source.startswith("s3://") else local_objects(args.source)
    if args.shard:
        index, _, count = args.shard.partition("/")
        if not (index.isdigit() and count.isdigit() and int(index) < int(count)):
            raise UserError(f"--shard {args.shard}: expected I/N with 0 <= I < N, e.g. 0/2")
        objects = objects_for_host(objects, "ShardedByS3Key", int(index), int(count))
    log.info(
        f"agent: {plural(len(objects), 'object')} for channel '{args.channel}', "
        f"{plural(args.epochs, 'epoch')} into {args.data_dir}/{args.channel}_<epoch>"
    )
    agent = PipeAgent(
        args.data_dir,
        args.channel,
        objects,
        args.epochs,
        seed=args.seed,
        record_wrapper=args.record_wrapper,
        reader_wait_s=args.reader_wait,
    )
    _run_with_progress(agent, sum(o.size for o in objects) * args.epochs)
    log.info(f"agent: done, {agent.bytes_written} bytes written")
    return 0


def _run_with_progress(agent, total_bytes: int) -> None:
    """Run the agent in the foreground while a thread shows how far it got."""
    done = threading.Event()

    def show() -> None:
        with Progress(f"agent {agent.channel}", total=total_bytes or None, unit="B", unit_scale=True) as bar:
            while not done.wait(0.5):
                bar.update(agent.bytes_written - bar.n)
                bar.tick()
            bar.update(agent.bytes_written - bar.n)

    thread = threading.Thread(target=show, name="smlaunch-agent-progress", daemon=True)
    thread.start()
    try:
        agent.run()
    finally:
        done.set()
        thread.join(timeout=5)
