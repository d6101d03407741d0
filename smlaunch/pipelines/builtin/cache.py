"""The embedded datasets a channel may name as `builtin:<name>/<split>`, built once into a cache.

Each is a directory of TFRecord shards of `tf.train.Example` records (`image/encoded`,
`image/class/label`, `id`) per split plus a `manifest.json` giving classes and rows, written into
a staging directory and renamed into place, so a half-built dataset is never read and two
processes building it at once both end with the same complete copy.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path


def cache_root() -> Path:
    return Path(os.environ.get("SMLAUNCH_CACHE", Path.home() / ".cache" / "smlaunch"))


def prepare_cached(version: str, write_splits: Callable[[Path], dict], root: Path | None = None) -> Path:
    target = (root or cache_root()) / version
    if (target / "manifest.json").exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{version}-", dir=target.parent))
    log = logging.getLogger("smlaunch")
    log.info(f"building the builtin dataset {version} (once) into {target}")
    started = time.monotonic()
    try:
        manifest = write_splits(staging)
        log.info(f"built {version} in {time.monotonic() - started:.1f} s")
        (staging / "manifest.json").write_text(json.dumps(manifest, indent=2))
        try:
            staging.rename(target)
        except OSError:  # another process finished first; theirs is as good as ours
            shutil.rmtree(staging, ignore_errors=True)
    finally:
        if staging.exists() and staging != target:
            shutil.rmtree(staging, ignore_errors=True)
    return target


def write_shards(out: Path, split: str, records: list[bytes], shards: int) -> None:
    """`records` as `shards` TFRecord files `part-NNNNN.tfrecord` under `out/split`."""
    from smlaunch.pipelines.formats.tfrecord import write_records

    (out / split).mkdir(parents=True)
    per = -(-len(records) // shards)
    for n in range(shards):
        write_records(out / split / f"part-{n:05d}.tfrecord", records[n * per : (n + 1) * per])
