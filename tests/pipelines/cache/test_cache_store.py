"""The cache's files (`pipelines.cache`): shards written whole or not at all, read back without
pickle, sealed only when they hold every sample of the epoch once, a full disk turning the cache
off without failing a batch, and the same on the local S3-protocol server."""

from __future__ import annotations

import errno
import io

import numpy as np
import pytest

from smlaunch.config import op_specs
from smlaunch.pipelines.cache.blobs import field_blobs, field_column, field_from_blobs
from smlaunch.pipelines.cache.seal import seal
from smlaunch.pipelines.cache.store import CacheSpec, CacheStore, CacheWriteFailed
from smlaunch.pipelines.ops.chain import Chain


def _whole_shard(store: CacheStore, name: str):
    """A shard's chunks read one after another, as one table."""
    import pyarrow as pa

    offsets = store.shard_index(name)["offsets"]
    return pa.concat_tables(
        [store.read_chunk(name, int(a), int(b)) for a, b in zip(offsets[:-1], offsets[1:], strict=True)]
    )


def _batch(ids, size=6):
    rng = np.random.default_rng(int(ids[0]))
    images = [rng.integers(0, 255, (size + i % 3, size, 3), np.uint8) for i in range(len(ids))]
    return np.asarray(ids, np.int64), {"image": images, "label": np.asarray(ids, np.int64) % 10}


def test_fields_come_back_as_they_went_images_of_their_own_sizes_labels_bytes_and_no_pickle(tmp_path):
    ids, fields = _batch([3, 1, 2])
    fields["raw"] = np.array([b"ab", b"", b"xyz"], dtype=object)
    fields["vector"] = np.arange(6, dtype=np.float32).reshape(3, 2)
    store = CacheStore(str(tmp_path / "fp"))
    name = store.write_shard(ids, fields)
    assert store.shards() == [name] and name.endswith("-3")
    assert store.write_shard(ids, fields) == name  # the same batch again: the same shard, not a copy
    shard = _whole_shard(store, name)
    assert shard.column("id").to_pylist() == [3, 1, 2]
    back = {k: field_from_blobs(shard.column(k).to_pylist()) for k in fields}
    assert [a.shape for a in back["image"]] == [(6, 6, 3), (7, 6, 3), (8, 6, 3)]
    assert all(np.array_equal(a, b) for a, b in zip(back["image"], fields["image"], strict=True))
    assert back["label"].tolist() == [3, 1, 2] and back["label"].dtype == np.int64
    assert back["raw"].tolist() == [b"ab", b"", b"xyz"]
    assert np.array_equal(back["vector"], fields["vector"])
    with pytest.raises(TypeError, match="cannot be cached"):
        field_blobs(np.array([{"a": 1}], dtype=object))
    with pytest.raises(TypeError, match="cannot be cached"):  # the one-buffer path refuses them too
        field_column(np.array([(1, {"a": 1})], dtype=[("n", "i8"), ("o", object)]))
    # Nothing in a cache is unpickled: a planted id file holding an object is refused, nothing runs.
    hostile = io.BytesIO()
    np.save(hostile, np.array([object()], dtype=object), allow_pickle=True)
    (tmp_path / "fp" / "ids" / f"{name}.npz").write_bytes(hostile.getvalue())
    with pytest.raises(ValueError, match="allow_pickle"):
        store.shard_index(name)


def test_a_seal_keeps_each_sample_once_across_overlapping_shards_and_refuses_a_cache_missing_one(tmp_path):
    spec = CacheSpec(str(tmp_path / "fp"), 1, "fp")
    store = CacheStore(spec.root)
    store.write_shard(*_batch([0, 1, 2, 3]))
    # A restart in epoch 1 batched the rows it had not delivered differently: 2 and 3 twice.
    store.write_shard(*_batch([2, 3, 4]))
    manifest, line = seal(spec, np.arange(6), None)
    assert manifest is None and "1 rows of the epoch are not cached yet" in line
    assert store.manifest() is None  # nothing half-sealed: readers trust only FINAL
    store.write_shard(*_batch([5, 9]))  # 9: a row the epoch did not draw (no longer in the channel)
    manifest, line = seal(spec, np.array([5, 4, 3, 2, 1, 0, 0]), None)
    assert manifest is not None and manifest["rows"] == 6 and line.startswith("cache: sealed, 6 rows in 3 shards")
    kept = {name: (rows, dropped) for name, rows, dropped, _ in manifest["shards"]}
    assert sorted(rows for rows, _ in kept.values()) == [1, 1, 4]  # 4 and 5 each beside a duplicate, or 9
    read = []
    for name, (_, dropped) in kept.items():
        ids = _whole_shard(store, name).column("id").to_pylist()
        read += [i for i in ids if i not in dropped]
    assert sorted(read) == [0, 1, 2, 3, 4, 5]
    assert store.manifest() == manifest and seal(spec, None, 6)[0] == manifest  # sealed once, read as sealed


def test_a_full_disk_mid_write_leaves_no_partial_shard_turns_the_cache_off_and_the_batch_goes_on(tmp_path, monkeypatch):
    """ENOSPC from the writer's `write` (a patched file object, as a full tmpfs raises it)."""
    import builtins

    spec = CacheSpec(str(tmp_path / "fp"), 1, "fp", shard_rows=4, chunk_rows=2)
    ops = [
        op_specs.DecodeImage(op="decode_image"),
        op_specs.RandomResizedCrop(op="random_resized_crop", size=4),
        op_specs.ToUint8CHW(op="to_uint8_chw"),
    ]
    chain = Chain(ops, ["algo-1"], cache=spec)
    from PIL import Image

    def png(i):
        out = io.BytesIO()
        Image.fromarray(np.full((8, 8, 3), i, np.uint8)).save(out, "PNG")
        return out.getvalue()

    batch = {"image": np.array([png(i) for i in range(4)], dtype=object), "label": np.arange(4), "id": np.arange(4)}
    out = chain(dict(batch))
    assert out["image"].shape == (4, 3, 4, 4)
    (name,) = CacheStore(spec.root).shards()  # the call's 4 rows: one shard of two chunks
    assert CacheStore(spec.root).shard_index(name)["rows"].tolist() == [2, 2]
    real_open = builtins.open

    class Full(io.BufferedWriter):
        def write(self, data):
            raise OSError(errno.ENOSPC, "No space left on device")

    def full_open(path, mode="r", *args, **kwargs):
        if "w" in mode and str(path).startswith(str(tmp_path)):
            real_open(path, mode).close()  # the file is created, then the disk fills mid-write
            return Full(io.BytesIO())
        return real_open(path, mode, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", full_open)
    second = chain({**batch, "id": np.arange(4, 8)})
    assert second["id"].tolist() == [4, 5, 6, 7] and second["image"].shape == (4, 3, 4, 4)  # the batch went on
    monkeypatch.setattr(builtins, "open", real_open)
    leftovers = [p.name for p in (tmp_path / "fp").rglob("*") if p.is_file()]
    assert not [n for n in leftovers if n.endswith(".tmp")], leftovers  # no partial file stays
    chain({**batch, "id": np.arange(8, 12)})  # the writer is off: nothing more is written
    assert len(CacheStore(spec.root).shards()) == 1
    manifest, line = seal(spec, np.arange(12), None)
    assert manifest is None and line.startswith("cache: off for the rest of the run (a shard could not be written)")
    assert CacheStore(spec.root).shards() == []  # the seal deleted what was written
    with pytest.raises(CacheWriteFailed):
        monkeypatch.setattr(builtins, "open", full_open)
        CacheStore(spec.root).put("x", b"1")


def test_the_cache_on_the_local_s3_server_is_written_sealed_read_and_deleted_the_same_way(s3):
    s3.create_bucket(Bucket="cache")
    spec = CacheSpec("s3://cache/jobs/fp", 1, "fp")
    store = CacheStore(spec.root)
    first = store.write_shard(*_batch([0, 1, 2]))
    store.write_shard(*_batch([2, 3]))
    keys = sorted(o["Key"] for o in s3.list_objects_v2(Bucket="cache")["Contents"])
    assert keys == sorted(
        [f"jobs/fp/ids/{first}.npz", f"jobs/fp/shards/{first}.arrow"]
        + [
            f"jobs/fp/{d}/{n}.{e}"
            for n in store.shards()
            if n != first
            for d, e in (("ids", "npz"), ("shards", "arrow"))
        ]
    )
    manifest, _ = seal(spec, np.arange(4), None)
    assert manifest["rows"] == 4 and store.manifest() == manifest
    shard = _whole_shard(store, first)
    assert shard.column("id").to_pylist() == [0, 1, 2] and len(field_from_blobs(shard.column("image").to_pylist())) == 3
    store.fail("disk full")
    assert store.failed()
    store.delete([f"shards/{n}.arrow" for n in store.shards()])
    assert store.shards() == []


def test_a_resumed_epoch_is_read_from_what_its_checkpoint_s_positions_count_in():
    """A checkpoint taken before the cache was sealed counts files: its epoch reads the files though
    the cache is sealed now; one taken in a cached epoch reads the cache; one over a cache that is
    gone starts its epoch over, saying so."""
    from smlaunch.pipelines.cache.reader import epoch_source

    sealed = {"shards": [["b-1", 4, [], [[0, 10, 4]]]], "rows": 4, "units": 1}
    files_resume, cache_resume = {"epoch": 1, "space": None}, {"epoch": 2, "space": "fp"}
    assert epoch_source(sealed, "fp", None) == (sealed, None, None)
    assert epoch_source(None, "fp", None) == (None, None, None)
    assert epoch_source(sealed, "fp", files_resume) == (None, files_resume, None)
    assert epoch_source(sealed, "fp", {"epoch": 1}) == (None, {"epoch": 1}, None)  # a checkpoint from before
    assert epoch_source(sealed, "fp", cache_resume) == (sealed, cache_resume, None)
    manifest, resume, line = epoch_source(None, "fp", cache_resume)
    assert (manifest, resume) == (None, None) and "counted its place in cache fp, which is not sealed here" in line


def test_after_an_epoch_resumed_mid_way_the_seal_counts_its_rows_and_keeps_the_earlier_run_s_shards(tmp_path):
    """The ids of an epoch resumed from a checkpoint are only those drawn since: the rows written
    before the stop are in the cache, and sealed with the rest (tests/reliability's resumed jobs)."""
    spec = CacheSpec(str(tmp_path / "fp"), 1, "fp")
    store = CacheStore(spec.root)
    store.write_shard(*_batch([0, 1, 2, 3]))  # the run before the stop
    store.write_shard(*_batch([4, 5]))  # the resumed run's rest of the epoch
    assert seal(spec, None, 7)[0] is None  # the epoch delivered 7 rows: one is not cached
    assert seal(spec, None, None)[0] is None  # nothing to check it by: never sealed
    manifest, _ = seal(spec, None, 6)
    assert manifest["rows"] == 6 and sorted(rows for _, rows, _, _ in manifest["shards"]) == [2, 4]


def test_a_call_s_rows_make_one_shard_of_batch_sized_chunks_each_a_unit_read_with_one_ranged_read(tmp_path, s3):
    """Shards of about 128 MiB (`store.SHARD_BYTES`) hold a shard's rows in chunks of a batch: the
    seal lists each chunk that keeps a row, a chunk of another shard's duplicates is no unit (it
    would never end), and a chunk is read alone, from a folder and from the S3-protocol server."""
    from smlaunch.pipelines.cache.seal import cache_units

    s3.create_bucket(Bucket="cache")
    for root in (str(tmp_path / "fp"), "s3://cache/fp"):
        spec = CacheSpec(root, 1, "fp", shard_rows=10, chunk_rows=4)
        store = CacheStore(root)
        big = store.write_shard(*_batch(list(range(10))), chunk_rows=4)
        index = store.shard_index(big)
        assert index["rows"].tolist() == [4, 4, 2] and len(index["offsets"]) == 4
        # a restart's shard holding 4..7 first (by name) and 10: the big shard's middle chunk is all duplicates
        other = store.write_shard(*_batch([4, 5, 6, 7, 10]), chunk_rows=4)
        manifest, line = seal(spec, np.arange(11), None)
        assert manifest is not None and line.endswith(f"rows in 2 shards ({manifest['units']} chunks) at {root}"), line
        units = cache_units(manifest)
        chunks = {name: [rows for n, _, _, rows, _ in units if n == name] for name in (big, other)}
        if other < big:  # the other shard keeps 4..7: the big one's chunk of 4..7 is dropped whole
            assert chunks == {big: [4, 2], other: [4, 1]}, units
        else:  # the big shard keeps 4..7: the other's first chunk is all duplicates, its second keeps 10
            assert chunks == {big: [4, 4, 2], other: [1]}, units
        assert manifest["units"] == len(units) == 4
        read = []
        for name, start, end, rows, dropped in units:
            ids = store.read_chunk(name, start, end).column("id").to_pylist()
            kept = [i for i in ids if i not in dropped]
            assert len(kept) == rows
            read += kept
        assert sorted(read) == list(range(11))
        assert _whole_shard(store, big).column("id").to_pylist() == list(range(10))


def test_a_shard_is_about_128_mib_a_whole_number_of_batches_and_a_small_channel_still_spreads():
    from smlaunch.pipelines.cache.store import SHARD_BYTES, shard_rows

    row = 160 * 213 * 3  # bench/cache.py's rows: 160 px, 4:3
    assert shard_rows(64, 1_281_167, row, 64) == SHARD_BYTES // row // 64 * 64 == 1280
    assert shard_rows(64, 8000, row, 1) == 1280
    assert shard_rows(64, 1437, 12 * 16 * 3, 3) == 192  # each of 3 slots gets two calls or more
    assert shard_rows(64, 100, row, 8) == 64  # never below a batch
    assert shard_rows(64, 1000, None, 8) == 64  # a prefix whose output size is unknown: a batch


@pytest.mark.parametrize("where", ["folder", "s3"])
def test_a_cached_read_gives_each_kept_row_once_with_its_own_values_mixed_across_chunks_fields_as_arrays(
    tmp_path, where, request
):
    """`reader.read_cached` over shards written as the chain writes them (in a folder, mapped; on
    the local S3 server, ranged GETs): fields of one dtype and shape come back as arrays (images as
    a tensor column), one of rows of their own sizes as blobs; a dropped id (another shard's copy)
    and the ordinals drawn before a resume are left out; each other row comes once, with the
    values written for its id, and blocks mix the window's chunks."""
    import pyarrow as pa

    from smlaunch.pipelines.cache.blobs import from_blob
    from smlaunch.pipelines.cache.reader import read_cached

    rng = np.random.default_rng(5)
    written, units = {}, []
    if where == "s3":
        request.getfixturevalue("s3").create_bucket(Bucket="cache")
    store = CacheStore(str(tmp_path / "fp") if where == "folder" else "s3://cache/fp")
    for shard in range(3):
        ids = np.arange(shard * 100, shard * 100 + 40)
        fields = {
            "image": [rng.integers(0, 255, (5, 4, 3), np.uint8) for _ in ids],
            "label": ids % 7,
            "ragged": [np.arange(i % 3 + 1, dtype=np.int16) for i in ids],
        }
        for values in fields.values():  # one buffer or blob by blob: the same bytes
            assert field_column(values).equals(pa.array(field_blobs(values), pa.large_binary()))
        written.update(
            {int(i): (fields["image"][k], int(fields["label"][k]), fields["ragged"][k]) for k, i in enumerate(ids)}
        )
        name = store.write_shard(ids, fields, chunk_rows=16)
        index = store.shard_index(name)
        for c, rows in enumerate(index["rows"].tolist()):
            dropped = [shard * 100 + 1] if c == 0 else []
            units.append([name, int(index["offsets"][c]), int(index["offsets"][c + 1]), rows - len(dropped), dropped])
    picked = list(enumerate(units))
    blocks = list(read_cached(store.root, picked, {2: [0, 3]}, 4, 10, [0, 1, 0]))
    ids = np.concatenate([b.column("id").to_numpy() for b in blocks]).tolist()
    expected = sorted(set(written) - {1, 101, 201} - {32, 35})  # unit 2: shard 0's rows 32.. (ordinals 0 and 3)
    assert sorted(ids) == expected and len(ids) == len(set(ids))
    assert max(b.num_rows for b in blocks) == 10
    first = blocks[0]
    assert len({i // 16 for i in first.column("id").to_pylist()}) > 1  # a block mixes chunks
    for block in blocks:
        images = block.column("image").combine_chunks().to_numpy()  # a tensor column: one array
        assert images.shape[1:] == (5, 4, 3) and images.dtype == np.uint8
        for row, i in enumerate(block.column("id").to_pylist()):
            image, label, ragged = written[i]
            assert np.array_equal(images[row], image) and block.column("label")[row].as_py() == label
            assert np.array_equal(from_blob(block.column("ragged")[row].as_py()), ragged)


def test_a_cached_read_given_the_chain_runs_its_random_rest_and_the_chain_passes_those_rows_on(tmp_path):
    """A cached epoch whose reads run on the chain's hosts (`dataset.tail_in_read`): each block the
    read yields is what the chain makes of the same rows read plainly (a seeded chain: the same
    draws), the crop's output, not the cache's pixels; the chain's own task gives such a block
    back as it came, without the marker column."""
    from ray.data.block import BlockAccessor

    from smlaunch.pipelines.cache.reader import TAILED_COLUMN, read_cached

    spec = CacheSpec(str(tmp_path / "fp"), 1, "fp")
    ops = [
        op_specs.DecodeImage(op="decode_image"),
        op_specs.RandomResizedCrop(op="random_resized_crop", size=4),
        op_specs.HorizontalFlip(op="horizontal_flip"),
        op_specs.ToUint8CHW(op="to_uint8_chw"),
    ]
    store = CacheStore(spec.root)
    units = []
    for shard in range(2):
        ids = np.arange(shard * 100, shard * 100 + 24)
        rng = np.random.default_rng(shard)
        name = store.write_shard(
            ids, {"image": [rng.integers(0, 255, (9, 7, 3), np.uint8) for _ in ids], "label": ids % 5}, chunk_rows=8
        )
        index = store.shard_index(name)
        units += [
            [name, int(a), int(b), int(r), []]
            for a, b, r in zip(index["offsets"][:-1], index["offsets"][1:], index["rows"], strict=True)
        ]
    picked = list(enumerate(units))
    plain = list(read_cached(store.root, picked, {}, 3, 10, [0, 2, 0]))
    tailed = list(read_cached(store.root, picked, {}, 3, 10, [0, 2, 0], Chain(ops, ["algo-1"], seed=7, cache=spec)))
    assert len(tailed) == len(plain) > 2
    for block, before in zip(tailed, plain, strict=True):
        batch = BlockAccessor.for_block(block).to_numpy()
        assert batch[TAILED_COLUMN].tolist() == [1] * block.num_rows
        expected = Chain(ops, ["algo-1"], seed=7, cache=spec)(BlockAccessor.for_block(before).to_numpy())
        assert batch["image"].shape == (block.num_rows, 3, 4, 4)
        for name in ("id", "label", "image", "pos", "host"):
            assert np.array_equal(batch[name], expected[name]), name
        passed = Chain(ops, ["algo-1"], seed=7, cache=spec)(dict(batch))
        assert TAILED_COLUMN not in passed and passed["image"] is batch["image"]
        # the rest's share of the chain's time, timed apart: what the epochs reading the cache cost
        timed = expected["prep_s"] >= 0
        assert len(expected["tail_s"]) == block.num_rows
        assert np.all(expected["tail_s"][timed] <= expected["prep_s"][timed])
