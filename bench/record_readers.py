"""Record reader throughput, side by side on the same data in one run.

a. pipe_ingest: 100 KiB TFRecord records through a real FIFO (written by `cat` in another
   process): our Pipe reader (bounded open, both CRCs verified, records grouped into batches of 64)
   vs a raw `readinto` loop draining the same FIFO with a 1 MiB buffer (and the same 1 MiB pipe).
b. tfrecord_reader: the same file read by our reader vs the `tfrecord` PyPI package's
   `tfrecord_iterator` (which does not verify CRCs by default).
c. small_records: 1 KiB records, both CRCs verified, records/s on one core; shown beside it, records
   of 512 to 1536 bytes (the reader skips re-verifying a length CRC it has just verified, which
   only equal lengths benefit from).

Each comparison alternates its two sides run by run and keeps each side's best, so a noisy
neighbour (the FIFO writer shares the cores) hits both alike.

    python bench/record_readers.py [--records-100k 2000] [--records-1k 300000] [--runs 5]
"""

from __future__ import annotations

import argparse
import fcntl
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from results_log import report_result  # bench/, this script's folder

from smlaunch.pipelines.formats import iter_records, tfrecord
from smlaunch.pipelines.sources.fifo import READ_BUFFER, open_epoch


def write_file(path: Path, count: int, size: int, vary: bool = False) -> int:
    """`count` records of `size` bytes (with `vary`, of size/2 to 3*size/2 bytes, sizes random)."""
    payload = os.urandom(size * 2)
    sizes = random.Random(0)
    with open(path, "wb") as f:
        for i in range(count):
            n = sizes.randint(size // 2, size * 3 // 2) if vary else size
            f.write(tfrecord.encode_record(i.to_bytes(8, "little") + payload[8:n]))
    return path.stat().st_size


def feed(fifo: Path, data: Path) -> subprocess.Popen:
    return subprocess.Popen(["sh", "-c", f"cat '{data}' > '{fifo}'"])


def side_by_side(runs: int, first, second) -> tuple[float, float]:
    """Best time of each of two measurements, taken alternately."""
    times = [(first(), second()) for _ in range(runs)]
    return min(t[0] for t in times), min(t[1] for t in times)


def pipe_ours(tmp: Path, data: Path, epoch: int) -> float:
    fifo = tmp / f"train_{epoch}"
    os.mkfifo(fifo)
    writer = feed(fifo, data)
    started = time.perf_counter()
    batch = []
    with open_epoch(tmp, "train", epoch, timeout_s=30) as stream:
        for record in iter_records(stream, "tfrecord"):
            batch.append(record)
            if len(batch) == 64:  # a consumer would hand the batch on here
                batch = []
    took = time.perf_counter() - started
    writer.wait()
    fifo.unlink()
    return took


def pipe_raw(tmp: Path, data: Path, epoch: int) -> float:
    fifo = tmp / f"raw_{epoch}"
    os.mkfifo(fifo)
    writer = feed(fifo, data)
    started = time.perf_counter()
    buffer = bytearray(1 << 20)
    with open(fifo, "rb", buffering=0) as stream:
        try:  # the 1 MiB pipe buffer `open_epoch` asks for, so both sides drain the same pipe
            fcntl.fcntl(stream.fileno(), getattr(fcntl, "F_SETPIPE_SZ", 1031), READ_BUFFER)
        except OSError:
            pass
        while stream.readinto(buffer):
            pass
    took = time.perf_counter() - started
    writer.wait()
    fifo.unlink()
    return took


def file_ours(path: Path) -> float:
    started = time.perf_counter()
    for _ in tfrecord.read_file(path):
        pass
    return time.perf_counter() - started


def file_tfrecord_pkg(path: Path) -> float:
    from tfrecord.reader import tfrecord_iterator

    started = time.perf_counter()
    for _ in tfrecord_iterator(str(path)):
        pass
    return time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records-100k", type=int, default=2000)
    parser.add_argument("--records-1k", type=int, default=300_000)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        big = tmp / "big.tfrecord"
        size = write_file(big, args.records_100k, 100 * 1024)
        counter = iter(range(1000))
        ours, raw = side_by_side(
            args.runs, lambda: pipe_ours(tmp, big, next(counter)), lambda: pipe_raw(tmp, big, next(counter))
        )
        mb = size / 2**20
        print(
            f"a. {args.records_100k} x 100 KiB via FIFO ({mb:.0f} MiB): ours {mb / ours:.0f} MiB/s, "
            f"raw readinto {mb / raw:.0f} MiB/s"
        )
        mine, pkg = side_by_side(args.runs, lambda: file_ours(big), lambda: file_tfrecord_pkg(big))
        print(
            f"b. same file: ours {mb / mine:.0f} MiB/s (CRCs verified), tfrecord package {mb / pkg:.0f} MiB/s "
            "(no CRC check)"
        )
        small, mixed = tmp / "small.tfrecord", tmp / "mixed.tfrecord"
        write_file(small, args.records_1k, 1024)
        write_file(mixed, args.records_1k, 1024, vary=True)
        one_k, varied = side_by_side(args.runs, lambda: file_ours(small), lambda: file_ours(mixed))
        print(
            f"c. {args.records_1k} x 1 KiB: {args.records_1k / one_k:,.0f} records/s on one core "
            f"(512 B to 1.5 KiB, mixed: {args.records_1k / varied:,.0f} records/s)"
        )
        report_result(f"RESULT pipe_ingest ratio_vs_raw={raw / ours:.2f} goal=0.7")
        report_result(f"RESULT tfrecord_reader ratio_vs_tfrecord_pkg={pkg / mine:.2f} goal=3")
        report_result(f"RESULT small_records records_per_s={args.records_1k / one_k:.0f} goal=500000")
    return 0


if __name__ == "__main__":
    sys.exit(main())
