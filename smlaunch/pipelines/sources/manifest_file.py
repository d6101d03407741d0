"""ManifestFile channels: a JSON list naming the channel's objects, instead of a whole prefix.

SageMaker's format (API `S3DataSource.S3Uri`): `[{"prefix": "s3://bucket/some/prefix/"},
"relative/key-1", "relative/key-2", ...]`; each object is the prefix with the key appended, and
it lands in the channel's directory as an S3Prefix channel's object would, at its key relative
to the prefix's last `/`. Locally the prefix may also be a folder. The objects' sizes come from
one listing of the prefix (not a request per object), and a key the listing lacks is an error
naming the manifest and the key, before any host receives anything.
"""

from __future__ import annotations

import json
from pathlib import Path

from smlaunch.errors import DataError
from smlaunch.pipelines.sources.objects import ObjectSource, s3_client


def read_manifest_file(uri: str, endpoint_url: str | None = None) -> tuple[str, list[str]]:
    """(prefix, keys) of the ManifestFile at `uri` (a local path or `s3://`)."""
    try:
        if uri.startswith("s3://"):
            bucket, _, key = uri.removeprefix("s3://").partition("/")
            body = s3_client(endpoint_url).get_object(Bucket=bucket, Key=key)["Body"].read()
        else:
            body = Path(uri).expanduser().read_bytes()
    except Exception as exc:  # OSError, botocore's errors
        raise DataError(f"manifest file {uri}: cannot read it ({getattr(exc, 'strerror', None) or exc})") from None
    try:
        entries = json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise DataError(
            f"manifest file {uri}: not JSON ({exc}); a ManifestFile is "
            '[{"prefix": "s3://bucket/prefix/"}, "key-1", ...]'
        ) from None
    if (
        not isinstance(entries, list)
        or not entries
        or not isinstance(entries[0], dict)
        or not isinstance(entries[0].get("prefix"), str)
    ):
        raise DataError(f'manifest file {uri}: the first element must be {{"prefix": "s3://bucket/prefix/"}}')
    keys = entries[1:]
    bad = [k for k in keys if not isinstance(k, str) or not k]
    if bad:
        raise DataError(f"manifest file {uri}: element {keys.index(bad[0]) + 1} is {bad[0]!r}, not an object key")
    if not keys:
        raise DataError(f"manifest file {uri} lists no objects")
    return entries[0]["prefix"], keys


def manifest_file_objects(uri: str, endpoint_url: str | None = None) -> tuple[ObjectSource, list[tuple[str, int]]]:
    """The source the manifest's objects are read from and (relative path, size) of each, in the
    manifest's order. Relative paths are under the prefix's last `/`, as S3Prefix channels'."""
    prefix, keys = read_manifest_file(uri, endpoint_url)
    base = prefix.rsplit("/", 1)[0] + "/" if "/" in prefix.removeprefix("s3://") else prefix
    stem = prefix[len(base) :]
    source = ObjectSource(base.rstrip("/") if not base.startswith("s3://") else base, endpoint_url)
    sizes = dict(source.list())
    objects, missing = [], []
    for key in keys:
        rel = stem + key
        if rel not in sizes:
            missing.append(key)
        else:
            objects.append((rel, sizes[rel]))
    if missing:
        raise DataError(f"manifest file {uri}: {len(missing)} listed object(s) not under {prefix}, e.g. {missing[0]}")
    return source, objects
