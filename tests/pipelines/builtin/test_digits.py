import json

from smlaunch.pipelines.builtin.digits import prepare_digits
from smlaunch.pipelines.formats.example import decode_example
from smlaunch.pipelines.formats.tfrecord import read_file


def test_digits_are_prepared_once_as_jpeg_tfrecords(tmp_path):
    root = prepare_digits(tmp_path)
    manifest = json.loads((root / "manifest.json").read_text())
    assert manifest["splits"] == {"train": {"records": 1437, "shards": 4}, "validation": {"records": 360, "shards": 2}}
    rows = [decode_example(r) for f in sorted((root / "validation").iterdir()) for r in read_file(f)]
    assert len(rows) == 360
    assert rows[0]["image/encoded"][0][:2] == b"\xff\xd8"  # JPEG
    assert {r["image/class/label"][0] for r in rows} == set(range(10))
    train_ids = {decode_example(r)["id"][0] for f in (root / "train").iterdir() for r in read_file(f)}
    assert train_ids.isdisjoint(r["id"][0] for r in rows) and len(train_ids) == 1437
    mtime = (root / "manifest.json").stat().st_mtime
    assert prepare_digits(tmp_path) == root and (root / "manifest.json").stat().st_mtime == mtime
