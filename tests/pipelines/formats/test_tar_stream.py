"""The tar framing under WebDataset shards, checked against archives other tools wrote: Python's
`tarfile` in each of its formats, GNU tar, webdataset's TarWriter, concatenated as Pipe mode
sends them, through a real FIFO-like pipe that returns short reads."""

from __future__ import annotations

import io
import os
import subprocess
import tarfile
import threading

import pytest

from smlaunch.pipelines.formats.tar_stream import CHUNK, iter_members
from smlaunch.pipelines.formats.tfrecord import RecordError
from smlaunch.pipelines.formats.webdataset import iter_samples

LONG_DIR = "class-" + "x" * 70 + "/nested-" + "y" * 60  # over ustar's 100-byte name field
FILES = {
    "a/sample000.jpg": b"\xff\xd8" + bytes(range(256)) * 3,
    "a/sample000.cls": b"3",
    "a/empty.txt": b"",
    "a/block.bin": b"b" * 512,
    f"{LONG_DIR}/sample001.jpg": b"\x89PNG" + b"p" * 1000,
    "a/big.bin": os.urandom(CHUNK + 1234),  # spans the reader's chunks
}


def tarfile_archive(fmt: int, names: dict[str, bytes], fractional_mtime: bool = False, others: bool = True) -> bytes:
    """An archive by Python's `tarfile`; `others`: a directory and a symlink among the files."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=fmt) as archive:
        if others:
            directory = tarfile.TarInfo("a")
            directory.type = tarfile.DIRTYPE
            archive.addfile(directory)
        for name, data in names.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mtime = 1_700_000_000.25 if fractional_mtime else 1_700_000_000
            archive.addfile(info, io.BytesIO(data))
        if others:
            link = tarfile.TarInfo("a/link.jpg")
            link.type, link.linkname = tarfile.SYMTYPE, "sample000.jpg"
            archive.addfile(link)
    return out.getvalue()


def tarfile_members(data: bytes) -> list[tuple[int, str, bytes]]:
    with tarfile.open(fileobj=io.BytesIO(data), mode="r|", ignore_zeros=True) as archive:
        return [(m.offset, m.name, archive.extractfile(m).read()) for m in archive if m.isfile()]


def ours(data: bytes) -> list[tuple[int, str, bytes]]:
    return list(iter_members(io.BytesIO(data), "shard.tar"))


@pytest.mark.parametrize("fmt", [tarfile.USTAR_FORMAT, tarfile.GNU_FORMAT, tarfile.PAX_FORMAT])
@pytest.mark.parametrize("fractional_mtime", [False, True])
def test_members_match_tarfile_in_each_of_its_formats(fmt, fractional_mtime):
    data = tarfile_archive(fmt, FILES, fractional_mtime)
    got = ours(data)
    assert got == tarfile_members(data)
    assert [name for _, name, _ in got] == list(FILES)
    assert all(body == FILES[name] for _, name, body in got)


def test_non_ascii_names_in_pax_and_gnu_archives():
    names = {"klasse-äöü/bild-日本.jpg": b"x" * 10, "z/" + "é" * 80 + ".png": b"y"}
    for fmt in (tarfile.PAX_FORMAT, tarfile.GNU_FORMAT):
        assert ours(tarfile_archive(fmt, names)) == tarfile_members(tarfile_archive(fmt, names))


@pytest.mark.parametrize("fmt", ["gnu", "posix", "ustar"])
def test_members_of_archives_gnu_tar_wrote(tmp_path, fmt):
    tree = tmp_path / "tree"
    for name, data in FILES.items():
        (tree / name).parent.mkdir(parents=True, exist_ok=True)
        (tree / name).write_bytes(data)
    (tree / "a" / "link.jpg").symlink_to("sample000.jpg")
    shard = tmp_path / "shard.tar"
    subprocess.run(["tar", f"--format={fmt}", "-cf", str(shard), "-C", str(tree), "--sort=name", "."], check=True)
    data = shard.read_bytes()
    got = ours(data)
    assert got == tarfile_members(data)
    assert len(got) == len(FILES)


def test_concatenated_shards_through_a_pipe_with_short_reads():
    """Pipe mode: shards back to back, each with its end blocks, read from a pipe whose writer
    sends odd-sized pieces, so headers and members are split across reads."""
    first = tarfile_archive(tarfile.PAX_FORMAT, FILES, fractional_mtime=True)
    second = tarfile_archive(tarfile.GNU_FORMAT, {"b/sample002.jpg": b"j" * 3000, "b/sample002.cls": b"7"})
    stream = first + second
    read_end, write_end = os.pipe()

    def write():
        with os.fdopen(write_end, "wb", buffering=0) as sink:
            for start in range(0, len(stream), 777):
                sink.write(stream[start : start + 777])

    writer = threading.Thread(target=write)
    writer.start()
    with os.fdopen(read_end, "rb", buffering=0) as source:
        got = list(iter_members(source, "fifo"))
    writer.join(timeout=10)
    expected = tarfile_members(first) + [(len(first) + o, n, d) for o, n, d in tarfile_members(second)]
    assert got == expected


def test_webdataset_tarwriter_samples_and_their_offsets(tmp_path):
    import webdataset as wds

    with wds.TarWriter(str(tmp_path / "s.tar")) as sink:
        for n in range(5):
            sink.write({"__key__": f"dir/k{n}", "jpg": bytes([n]) * 600, "cls": n, "seg.png": b"m"})
    with open(tmp_path / "s.tar", "rb") as stream:
        samples = list(iter_samples(stream, "s.tar"))
    firsts = {m.name: m.offset for m in tarfile.open(tmp_path / "s.tar") if m.name.endswith(".cls")}
    assert [s["__key__"] for _, s in samples] == [f"dir/k{n}".encode() for n in range(5)]
    assert [(s["jpg"], s["cls"], s["seg.png"]) for _, s in samples] == [
        (bytes([n]) * 600, str(n).encode(), b"m") for n in range(5)
    ]
    assert [offset for offset, _ in samples] == [firsts[f"dir/k{n}.cls"] for n in range(5)]  # .cls sorts first


def _with_checksum(header: bytearray) -> bytes:
    header[148:156] = b" " * 8
    header[148:156] = b"%06o\0 " % sum(header)
    return bytes(header)


def test_a_base256_size_is_read():
    """GNU tar writes sizes of 8 GiB and more in base 256; the same encoding on a small member."""
    data = bytearray(tarfile_archive(tarfile.GNU_FORMAT, {"x.bin": b"q" * 700}, others=False))
    header = bytearray(data[:512])
    header[124:136] = b"\x80" + (700).to_bytes(11, "big")
    data[:512] = _with_checksum(header)
    assert ours(bytes(data)) == [(0, "x.bin", b"q" * 700)]


def test_damage_is_named_with_the_source_and_the_byte_offset():
    data = tarfile_archive(tarfile.USTAR_FORMAT, {"a.jpg": b"a" * 600, "b.jpg": b"b" * 600}, others=False)
    second = 512 + 1024  # a.jpg's header and its data padded to 1024
    flipped = data[: second + 10] + bytes([data[second + 10] ^ 0x01]) + data[second + 11 :]
    with pytest.raises(RecordError, match=rf"^shard.tar: bad tar header checksum at byte {second} "):
        ours(flipped)
    with pytest.raises(RecordError, match=r"^shard.tar: member b.jpg at byte 1536 is cut short \(100 of 600 bytes\)$"):
        ours(data[: second + 512 + 100])
    with pytest.raises(RecordError, match=r"^shard.tar: the tar archive ends inside a header at byte 1536 \("):
        ours(data[: second + 100])
    assert ours(data[:second]) == [(0, "a.jpg", b"a" * 600)]  # a whole member, then the end: no error
    with pytest.raises(RecordError, match=r"^shard.tar: not a tar header at byte 0 "):
        ours(b"PK\x03\x04" + b"\xff" * 508)  # not an archive at all


def _header(name: str, kind: bytes, data: bytes) -> bytes:
    info = tarfile.TarInfo(name)
    info.type, info.size = kind, len(data)
    return info.tobuf(tarfile.USTAR_FORMAT) + data + bytes(-len(data) % 512)


def _pax(**records) -> bytes:
    body = b""
    for key, value in records.items():
        record = f" {key.replace('_', '.')}={value}\n".encode()
        length = len(record) + len(str(len(record) + len(str(len(record)))))
        body += str(length).encode() + record
    return _header("././@PaxHeader", tarfile.XHDTYPE, body)


def test_what_other_writers_put_around_members():
    """A global pax header (git archive) is not the first member's; a pax size belongs to the
    member, not to a pax header after it; end padding cut short loses nothing; old tars' signed
    checksums are accepted, as tarfile accepts them."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT, pax_headers={"comment": "v1"}) as archive:
        info = tarfile.TarInfo("a.jpg")
        info.size = 3
        archive.addfile(info, io.BytesIO(b"abc"))
    assert ours(out.getvalue()) == tarfile_members(out.getvalue()) == [(1024, "a.jpg", b"abc")]

    member = tarfile.TarInfo("short")
    member.size = 1000
    stacked = _pax(size=1000) + _pax(path="long.jpg") + member.tobuf(tarfile.USTAR_FORMAT) + b"q" * 1024 + bytes(1024)
    assert ours(stacked) == tarfile_members(stacked) == [(0, "long.jpg", b"q" * 1000)]

    assert ours(_header("a.jpg", tarfile.REGTYPE, b"abc") + bytes(100)) == [(0, "a.jpg", b"abc")]

    signed = bytearray(_header("ete.jpg", tarfile.REGTYPE, b"x"))
    signed[0:3] = b"\xe9t\xe9"  # bytes above 127 in the name: signed and unsigned sums differ
    signed[148:156] = b" " * 8
    total = sum(b - 256 if b > 127 else b for b in signed[:512])
    signed[148:156] = b"%06o\0 " % total
    assert [data for _, _, data in ours(bytes(signed))] == [b"x"] == [d for _, _, d in tarfile_members(bytes(signed))]


@pytest.mark.parametrize(
    "damage, message",
    [
        (
            lambda: _header("x", tarfile.XHDTYPE, b"garbage") + _header("a.jpg", tarfile.REGTYPE, b"a"),
            r"bad pax extended header at byte 0",
        ),
        (
            lambda: _pax(GNU_sparse_major=1, GNU_sparse_minor=0) + _header("a.jpg", tarfile.REGTYPE, b"a"),
            r"member a.jpg at byte 0 is a GNU sparse file",
        ),
        (
            lambda: (
                _header("a.jpg", tarfile.REGTYPE, b"a")[:148] + bytes(8) + _header("a.jpg", tarfile.REGTYPE, b"a")[156:]
            ),
            r"not a tar header at byte 0",
        ),  # no checksum at all
    ],
)
def test_damaged_headers_are_named_not_looped_on(damage, message):
    with pytest.raises(RecordError, match=message):
        ours(damage())
