"""`sm-launch inspect PATH --format FORMAT`: what a data file holds, for debugging a channel.

Prints the record count, the total payload bytes and the first records' sizes, or the one-line
error with the byte offset where the file stops making sense. Streams the file: a pipe or a
multi-gigabyte shard costs no more memory than its largest record.
"""

from __future__ import annotations

import logging

from smlaunch.console import RESULT
from smlaunch.pipelines.formats import FORMATS

log = logging.getLogger("smlaunch")
FIFO_WAIT_S = 60.0


def add_arguments(parser) -> None:
    parser.add_argument("path", help="a record file (or a FIFO)")
    parser.add_argument("--format", required=True, choices=FORMATS)
    parser.add_argument(
        "--fifo-wait",
        type=float,
        default=FIFO_WAIT_S,
        metavar="S",
        help="PATH is a FIFO: seconds to wait for a writer (default %(default)s)",
    )


def main(args, failure) -> int:
    from smlaunch.errors import DataError

    try:
        inspect_path(args.path, args.format, fifo_wait_s=args.fifo_wait, out=lambda line: log.log(RESULT, line))
    except OSError as exc:
        raise DataError(f"{args.path}: {exc.strerror or exc}") from None
    return 0


def inspect_path(path: str, format: str, show: int = 5, out=print, fifo_wait_s: float = FIFO_WAIT_S) -> int:
    import os
    import stat
    import time

    from smlaunch.pipelines.sources.fifo import open_fifo

    if stat.S_ISFIFO(os.stat(path).st_mode):  # a plain open would block until a writer comes, forever
        with open_fifo(
            path, time.monotonic() + fifo_wait_s, f"{path}: no writer opened the FIFO within {fifo_wait_s:.0f} s"
        ) as stream:
            return _inspect(stream, path, format, show, out)
    return _inspect(path, path, format, show, out)


def _inspect(source, path: str, format: str, show: int, out) -> int:
    from smlaunch.pipelines.formats import iter_records

    count = total = 0
    first: list[int] = []
    for record in iter_records(source, format, path):
        count += 1
        total += len(record)
        if len(first) < show:
            first.append(len(record))
    out(f"{path}: {count} {format} records, {total} payload bytes")
    if first:
        out(f"first record sizes: {', '.join(str(n) for n in first)}")
    return count
