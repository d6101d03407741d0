"""Record reader throughput, side by side on the same data in one run.

a. pipe_ingest: 100 KiB TFRecord records through a real FIFO (written by `cat` in another
   process): our Pipe reader (bounded open, both CRCs verified, records grouped into batches of 64)
   vs a raw `readinto` loop draining the same FIFO with a 1 MiB buffer.
b. tfrecord_reader: the same file read by our reader vs the `tfrecord` PyPI package's
   `tfrecord_iterator` (which does not verify CRCs by default).
c. small_records: 1 KiB records, both CRCs verified, records/s on one core.

    python bench/record_readers.py [--records-100k 2000] [--records-1k 300000]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from smlaunch.pipelines.formats import iter_records, tfrecord
from smlaunch.pipelines.pipe import open_epoch


def write_file(path: Path, count: int, size: int) -> int:
    payload = os.urandom(size)
    with open(path, "wb") as f:
        for i in range(count):
            f.write(tfrecord.encode_record(i.to_bytes(8, "little") + payload[8:]))
    return path.stat().st_size


def feed(fifo: Path, data: Path) -> subprocess.Popen:
    return subprocess.Popen(["sh", "-c", f"cat '{data}' > '{fifo}'"])


def best_of(runs: int, fn) -> float:
    return min(fn() for _ in range(runs))


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
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        big = tmp / "big.tfrecord"
        size = write_file(big, args.records_100k, 100 * 1024)
        counter = iter(range(1000))
        ours = best_of(3, lambda: pipe_ours(tmp, big, next(counter)))
        raw = best_of(3, lambda: pipe_raw(tmp, big, next(counter)))
        mb = size / 2**20
        print(f"a. {args.records_100k} x 100 KiB via FIFO ({mb:.0f} MiB): ours {mb / ours:.0f} MiB/s, "
              f"raw readinto {mb / raw:.0f} MiB/s")
        pkg = best_of(3, lambda: file_tfrecord_pkg(big))
        mine = best_of(3, lambda: file_ours(big))
        print(f"b. same file: ours {mb / mine:.0f} MiB/s (CRCs verified), tfrecord package {mb / pkg:.0f} MiB/s "
              "(no CRC check)")
        small = tmp / "small.tfrecord"
        write_file(small, args.records_1k, 1024)
        one_k = best_of(3, lambda: file_ours(small))
        print(f"c. {args.records_1k} x 1 KiB: {args.records_1k / one_k:,.0f} records/s on one core")
        print(f"RESULT pipe_ingest ratio_vs_raw={raw / ours:.2f} goal=0.7")
        print(f"RESULT tfrecord_reader ratio_vs_tfrecord_pkg={pkg / mine:.2f} goal=3")
        print(f"RESULT small_records records_per_s={args.records_1k / one_k:.0f} goal=500000")
    return 0


if __name__ == "__main__":
    sys.exit(main())
