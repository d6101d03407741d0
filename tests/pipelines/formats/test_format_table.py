"""The format table (`config.formats`): one `Format` per reader module, what each states agreeing
with what its files and readers do, and no branch on a format's name outside the table and the
readers."""

import io
import re
import tarfile
import typing
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from smlaunch.config.channel_rules import CLASSES_FROM_DATA, RECORD_FORMATS
from smlaunch.config.formats import LAYOUTS, RecordFormat
from smlaunch.pipelines.formats import CHANNEL_FORMATS, LOOKS_LIKE, parquet, recordio, tfrecord, webdataset
from smlaunch.pipelines.formats.sniff import HEAD_BYTES, suggestion

PACKAGE = Path(__file__).resolve().parents[3] / "smlaunch"


def first_bytes(name: str, tmp_path: Path) -> bytes:
    """The head of a file each format's usual writer makes."""
    path = tmp_path / name
    if name == "tfrecord":
        tfrecord.write_records(path, [b"x" * 20])
    elif name == "recordio":
        recordio.write_records(path, [b"x" * 20])
    elif name == "webdataset":
        with tarfile.open(path, "w") as tar:
            info = tarfile.TarInfo("a.jpg")
            info.size = 3
            tar.addfile(info, io.BytesIO(b"abc"))
    elif name == "parquet":
        pq.write_table(pa.table({"image": [b"x"], "label": [0]}), path)
    else:
        path.write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(40))
    return path.read_bytes()[:HEAD_BYTES]


def test_the_table_has_a_reader_module_for_each_format():
    modules = (tfrecord, recordio, webdataset, parquet)
    assert list(LOOKS_LIKE) == list(CHANNEL_FORMATS)  # each format's reader module says how its files start
    assert all(LOOKS_LIKE[module.__name__.rsplit(".", 1)[1]] is module.matches for module in modules)
    assert RECORD_FORMATS == tuple(CHANNEL_FORMATS) == typing.get_args(RecordFormat)  # the config's choices
    assert CLASSES_FROM_DATA == ("image_folder", "parquet")
    assert {spec.layout for spec in CHANNEL_FORMATS.values()} == set(LAYOUTS)  # each layout has its reader


@pytest.mark.parametrize("name", list(CHANNEL_FORMATS))
def test_each_format_recognises_its_own_files_and_no_other_s(name, tmp_path):
    heads = {other: first_bytes(other, tmp_path) for other in CHANNEL_FORMATS}
    assert LOOKS_LIKE[name](heads[name])
    assert [other for other, head in heads.items() if LOOKS_LIKE[name](head)] == [name]
    assert suggestion(heads[name]) == f"; did you mean record_format: {name}?"


def test_which_files_are_data_is_the_format_s_rule():
    images, parquet_files = CHANNEL_FORMATS["image_folder"], CHANNEL_FORMATS["parquet"]
    assert images.is_data("cat/1.JPG") and not images.is_data("top.jpg")
    assert not images.is_data("cat/notes.txt")
    assert parquet_files.is_data("part-0.parquet") and not parquet_files.is_data("year=1/_SUCCESS")
    assert CHANNEL_FORMATS["tfrecord"].is_data("anything.bin")
    assert images.data_names("", ["a.jpg"]) == []  # a file at the top level is no class's


def test_no_branch_on_a_format_s_name_outside_the_formats_package():
    names = "|".join(CHANNEL_FORMATS)
    branch = re.compile(rf"""(==|!=|\bin)\s*\(?\s*["']({names})["']|["']({names})["']\s*(==|!=)""")
    found = [
        f"{path.relative_to(PACKAGE)}:{n}: {line.strip()}"
        for path in PACKAGE.rglob("*.py")
        if "formats" not in path.parts and path.name != "formats.py"
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if branch.search(line)
    ]
    assert found == []
