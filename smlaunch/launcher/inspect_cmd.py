"""`sm-launch inspect PATH --format FORMAT`: what a data file holds, for debugging a channel.

Prints the record count, the total payload bytes and the first records' sizes, or the one-line
error with the byte offset where the file stops making sense. Streams the file: a pipe or a
multi-gigabyte shard costs no more memory than its largest record.
"""

from __future__ import annotations


def inspect_path(path: str, format: str, show: int = 5, out=print) -> int:
    from smlaunch.pipelines.formats import iter_records

    count = total = 0
    first: list[int] = []
    for record in iter_records(path, format):
        count += 1
        total += len(record)
        if len(first) < show:
            first.append(len(record))
    out(f"{path}: {count} {format} records, {total} payload bytes")
    if first:
        out(f"first record sizes: {', '.join(str(n) for n in first)}")
    return count
