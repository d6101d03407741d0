"""A cache's fingerprint: what the cached prefix output depends on, hashed, as its folder's name.

A cache is only as good as its key. tf.data's `cache(filename)` has none and silently serves stale
data after a pipeline change; Hugging Face `datasets` pickles an imported function by reference, so
an edited function reuses the old cache (../shared/notes/cache.md §1, §5). The fingerprint hashes:

* the source: every listed file's path, size and modification time (stat'ed on the host that holds
  it: a file rewritten in place keeps its name and often its size, not its mtime); a FastFile
  view's keys and sizes;
* the channel's format and fields, and the prefix ops with all their parameters;
* the source code of each user function the prefix calls (the module's file, not its name);
* the versions of the libraries that shape pixels (JPEG decoding differs between libjpeg builds
  and Pillow releases; torchvision's resize changed its antialias default) and of Python;
* the cache's format version.

No manual override: deciding by hand whether a pipeline changed is the error the key prevents.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path

from smlaunch.pipelines.cache.store import FORMAT_VERSION

PIXEL_LIBRARIES = ("numpy", "pillow", "torch", "torchvision", "pyarrow")


def files_digest(directory, rels) -> str:
    """SHA-256 of `rels`' paths, sizes and mtimes under `directory`; a path with no file there (a
    FastFile view's key) counts by its path alone."""
    digest = hashlib.sha256()
    for rel in rels:
        try:
            st = os.stat(directory / rel)
            digest.update(f"{rel}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
        except OSError:
            digest.update(f"{rel}\0?\n".encode())
    return digest.hexdigest()


def code_digest(function: str) -> str:
    """SHA-256 of the file that defines `package.module:function` (found, not imported)."""
    import importlib.util

    module = function.partition(":")[0]
    spec = importlib.util.find_spec(module)
    origin = spec.origin if spec is not None else None
    if origin is None or not Path(origin).is_file():
        return f"unfound:{module}"
    return hashlib.sha256(Path(origin).read_bytes()).hexdigest()


def library_versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    found = {"python": sys.version.split()[0]}
    for name in PIXEL_LIBRARIES:
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            found[name] = "absent"
    try:
        from PIL import features

        found["libjpeg_turbo"] = str(features.version("libjpeg_turbo"))
    except Exception:  # an old Pillow without `features.version`: its version above still counts
        found["libjpeg_turbo"] = "unknown"
    return found


def fingerprint(channel_config: dict, prefix_ops: list, source: str) -> str:
    """The cache's key (24 hex digits) for a prefix (`op_specs` models) over the channel described
    by `channel_config` (its format and fields) and `source` (`source_digest`)."""
    code = {op.function: code_digest(op.function) for op in prefix_ops if op.op in ("user", "map")}
    key = {
        "format": FORMAT_VERSION,
        "channel": channel_config,
        "prefix": [op.model_dump(mode="json") for op in prefix_ops],
        "code": code,
        "libraries": library_versions(),
        "source": source,
    }
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:24]
