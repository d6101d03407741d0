"""What a File-channel read task reads: its units (files, or Parquet row groups), and how many at once.

A channel's units are held per share as arrays over its `FileList` (`Units`), so 1.28M files
cost no tuple each; a read task gets only its own units, packed (`PackedUnits`), or as indices
into its share's arrays in the object store that it packs itself (`LazyUnits`), with each unit's
place in the epoch's order (its rows' positions, `pipelines.order`), a resumed epoch's drawn
ordinals of its units in flight and where to enter them, and how many it interleaves
(`units_per_task`). A pass is cut into read tasks here too (`read_runs`: bounded tasks, short
first ones), and into the blocks the ranks share (`balanced_blocks`).
"""

from __future__ import annotations

import itertools

import numpy as np

from smlaunch.cluster.plan import ChannelPlan

MAX_OPEN_PER_TASK = 1024
"""Files one read task holds open at most: a descriptor and an 8 KiB buffer each (Ray raises its
workers' descriptor limit to the hard limit, 20,000 and more on the hosts we know)."""
MAX_OPEN_LAZY = 64
"""FastFile objects one read task holds open at most: each reads ahead up to `fastfile.BLOCK` (8 MiB)."""
MAX_OPEN_ROW_GROUPS = 8
"""Parquet row groups one read task holds at once: each is decoded whole (often 100+ MB of images)."""


TASK_UNITS = 4096
"""Units (files, row groups) one read task reads at most: about 0.4 s of small image files on one
CPU (1.28M files of 700 bytes took one task 125 s), so a pass is many short tasks, as Ray Data's
own readers make: a retried task (a lost host) redoes little, and the last tasks of a pass end
together."""
TASK_BYTES = 1 << 30
"""Listed bytes one read task reads at most (a few seconds from a local disk or S3): by blocks
instead (4 of ImageNet's 29 MiB), 100,000 WebDataset shards of 110 MB were 95,152 tasks an
epoch, and planning them took the split coordinator minutes; at 1 GiB, 10,000. A task still
holds one unit whole (a WebDataset shard, a Parquet row group). What a task adds to the object
store is bounded by Ray Data, not by its size: its blocks stream out, and its generator waits
while the read is over budget."""


HEAD_BATCHES = 2
"""A large image-folder pass starts with short read tasks of this many chain batches' files each
(`headed_runs`)."""


def read_runs(units: Units, readers: int, head: int = 0, head_rows: int = 0) -> list[range]:
    """A share's read tasks as runs of its epoch's order: at least one per reader, enough that none
    reads more than `TASK_UNITS` units or `TASK_BYTES`, the first ones cut short (`headed_runs`)."""
    from smlaunch.pipelines.order import task_runs

    bounded = max(-(-len(units) // TASK_UNITS), -(-units.total_size() // TASK_BYTES))
    runs = task_runs(len(units), max(1, min(max(readers, bounded), len(units))))
    return headed_runs(runs, readers, head, max(readers, -(-head_rows // head)) if head else 0)


def headed_runs(runs: list[range], readers: int, head: int, heads: int) -> list[range]:
    """`runs` with the first `head` positions of each of the first `heads` runs cut off as runs of
    their own, listed first; unchanged when the runs are no more than the `readers` (a small pass:
    its tasks' blocks are what make the ranks' shares even, `balanced_blocks`).

    Ray Data merges what a read task yields into blocks of the job's size (1 MiB and more) and
    hands on a smaller one only when the task ends: about 1,250 of the 833-byte JPEGs of
    bench/scale.py's 1.28M-file folder, which a cold disk of small files (this VM: 300-600 a
    second) read for seconds before the chain had its first rows. And a train worker's iterator
    yields its first batch only once it holds `prefetch_batches` batches and one block more
    (`iter_batches.prefetch_batches_locally`). Tasks of two chain batches end at once, enough of
    them to fill every rank's first window (`ChannelDatasource.head_rows`); their files are still
    read in the epoch's order, and a checkpoint counts them as any task's (`pipelines.position`)."""
    if head <= 0 or len(runs) <= readers:
        return runs
    cut = runs[:heads]
    heads_ = [range(run.start, min(run.start + head, run.stop)) for run in cut]
    rests = [range(h.stop, run.stop) for h, run in zip(heads_, cut, strict=False) if h.stop < run.stop]
    return heads_ + rests + runs[len(cut) :]


BLOCKS_PER_RANK_BALANCED = 64
"""From this many blocks per rank on, a rank at most one block ahead is within 1.6 % of the others."""


def balanced_blocks(tasks: int, size: int, target: int, cpus: int, ranks: int, at_least: int = 0) -> int:
    """How many blocks a pass of `tasks` read tasks over `size` bytes should end in, so that the
    ranks get equal shares.

    The ranks take blocks as they come, each going to the rank with the fewest rows so far, so a
    rank may end a block ahead. Ray Data's own count (twice the cluster's CPUs for a small
    channel) gave tests/launcher/test_end_to_end.py's S3 job, 1436 rows over 3 ranks, 10 blocks
    of 144 rows once its read tasks were bounded by CPUs: one rank got 576 rows and the epoch
    needed 18 steps instead of 15. So a small channel is cut into at least 4 blocks per rank and
    a multiple of the ranks (Ray splits each task's output evenly into the count asked for); a
    large one keeps one block per `target` bytes, as Ray plans it, where a block more or less
    is noise. At least twice the reading CPUs, so the chain has parallel work, and at least
    `at_least` (small blocks for elastic hosts: `ChannelDatasource.block_units`)."""
    tasks = max(tasks, 1)
    blocks = tasks * max(1, round(size / tasks / target))  # what the tasks yield before any split (Ray's estimate)
    split = -(-max(blocks, 2 * cpus, 4 * ranks, at_least) // blocks)
    if blocks * split < BLOCKS_PER_RANK_BALANCED * ranks:
        while (blocks * split) % ranks:
            split += 1
    return blocks * split


def units_per_task(channel: ChannelPlan, tasks: int) -> int:
    """How many units each of a pass's read tasks interleaves, `tasks` of them running at once:
    the channel's `open_units` is for the whole pass (what a rank's batches mix is the units open
    across all tasks, and what a checkpoint holds grows with them), shared by the tasks, at least
    one each, within what one task can hold open (`MAX_OPEN_*`)."""
    per_task = max(1, -(-channel.open_units // max(tasks, 1)))
    from smlaunch.pipelines.formats import CHANNEL_FORMATS

    if CHANNEL_FORMATS[channel.record_format].layout == "row_groups":
        return min(per_task, MAX_OPEN_ROW_GROUPS)
    return min(per_task, MAX_OPEN_LAZY if channel.input_mode == "FastFile" else MAX_OPEN_PER_TASK)


class Units:
    """One share's units in the listing's order, as arrays over its `FileList`: unit i is file i,
    or for Parquet a row group (`file_of[i]`, `group[i]`), with its share of the file's bytes.
    Built from 1.28M files in milliseconds, where a list of tuples took a second and 100+ MB.
    Iterates as `(rel, bytes, row group or None)`."""

    def __init__(self, files, groups: dict[str, int] | None):
        from smlaunch.pipelines.sources.file_list import FileList

        self.files = files if isinstance(files, FileList) else FileList.from_pairs(files)
        self._arrays: dict | None = None
        sizes = np.asarray(self.files.sizes, np.int64)
        if not groups:
            self.file_of = self.group = None
            self.sizes = sizes
            return
        counts = np.array([groups[rel] for rel in self.files.rels()], np.int64)
        self.file_of = np.repeat(np.arange(len(counts)), counts)
        starts = np.cumsum(counts) - counts
        self.group = np.arange(len(self.file_of)) - np.repeat(starts, counts)
        self.sizes = sizes[self.file_of] // np.maximum(counts[self.file_of], 1)

    def __len__(self) -> int:
        return len(self.sizes)

    def total_size(self) -> int:
        return int(self.sizes.sum())

    def __iter__(self):
        for i in range(len(self)):
            f = i if self.file_of is None else int(self.file_of[i])
            yield self.files._rel(f), int(self.sizes[i]), None if self.group is None else int(self.group[i])

    def arrays(self) -> dict | None:
        """What a task's units are gathered from (`packed_from`), as arrays; None when a path holds
        other characters than ASCII (offsets count characters, not bytes). Put in the object store
        once a job (`ChannelDatasource.share_listing`), they are mapped, not copied, by every read
        task on a host (`LazyUnits`)."""
        if not self.files.paths.isascii():
            return None
        ends = self.files.ends
        return {
            "chars": np.frombuffer(self.files.paths.encode("ascii"), np.uint8),
            "starts": ends - np.diff(ends, prepend=0),
            "ends": ends,
            "sizes": self.sizes,
            "file_of": self.file_of,
            "group": self.group,
        }

    def packed(self, picked: np.ndarray, places, drawn, open_units: int, seeks: dict | None = None) -> PackedUnits:
        """The units `picked` (indices, in reading order) as a read task's argument."""
        if self._arrays is None:  # once per share, not per task: a pass over 1.28M files has hundreds of tasks
            self._arrays = self.arrays() or {}
        if self._arrays:
            return packed_from(self._arrays, picked, places, drawn, open_units, seeks)
        files = picked if self.file_of is None else self.file_of[picked]
        groups, sizes = None if self.group is None else self.group[picked], self.sizes[picked]
        ends = self.files.ends
        starts = ends - np.diff(ends, prepend=0)
        return PackedUnits.of(
            [self.files.paths[a:b] for a, b in zip(starts[files].tolist(), ends[files].tolist(), strict=False)],
            groups,
            sizes,
            places,
            drawn,
            open_units,
            seeks,
        )


def packed_from(arrays: dict, picked: np.ndarray, places, drawn, open_units: int, seeks: dict | None = None):
    """The units `picked` of a share's `Units.arrays()` as a `PackedUnits`. The task's paths are
    gathered in one numpy take: slicing them one by one was 1 s of the 1.8 s a 1.28M-file pass took
    to plan, before its first read task could start."""
    files = picked if arrays["file_of"] is None else arrays["file_of"][picked]
    groups = None if arrays["group"] is None else arrays["group"][picked]
    starts, lengths = arrays["starts"][files], arrays["ends"][files] - arrays["starts"][files]
    shift = starts - (np.cumsum(lengths) - lengths)
    joined = arrays["chars"][np.repeat(shift, lengths) + np.arange(int(lengths.sum()))].tobytes().decode("ascii")
    return PackedUnits.of(joined, groups, arrays["sizes"][picked], places, drawn, open_units, seeks, lengths=lengths)


class LazyUnits:
    """A read task's units as indices into its share's `Units.arrays()`, which the driver put in
    the object store once a job (`ChannelDatasource.share_listing`); the task packs them itself
    (`resolve`). Packed by the split coordinator, every task's paths of a 1.28M-file pass took
    0.5 s to gather and 68 MiB to put before the first task could start (bench/scale.py's first
    step); as indices the pass's tasks are 10 MiB, and each task gathers its 4,096 paths in about
    a millisecond from arrays its host maps once. Iterates and sizes as the `PackedUnits` it
    resolves to."""

    __slots__ = ("share", "picked", "places", "drawn", "seeks", "open_units", "_packed")

    def __init__(self, share, picked: np.ndarray, places, drawn: dict, open_units: int, seeks: dict | None):
        self.share, self.places, self.drawn, self.seeks, self.open_units = share, places, drawn, seeks, open_units
        self.picked = picked.astype(np.int32) if len(picked) and picked.max() < 2**31 else picked
        self._packed: PackedUnits | None = None

    def resolve(self) -> PackedUnits:
        if self._packed is None:
            import ray

            self._packed = packed_from(
                ray.get(self.share), self.picked, self.places, self.drawn, self.open_units, self.seeks
            )
        return self._packed

    def __getstate__(self):
        return {name: getattr(self, name) for name in self.__slots__ if name != "_packed"}

    def __setstate__(self, state):
        for name, value in state.items():
            setattr(self, name, value)
        self._packed = None

    def __iter__(self):
        return iter(self.resolve())

    def __len__(self) -> int:
        return len(self.picked)

    def __getattr__(self, name):  # `sizes`, `paths`, `groups`, `lengths`: the resolved units'
        if name.startswith("__") or name in LazyUnits.__slots__:  # not set yet (unpickling)
            raise AttributeError(name)
        return getattr(self.resolve(), name)


class PackedUnits:
    """A read task's `(relative path, row group or None, listed bytes)` units, packed as one string
    and three arrays. A read task is pickled and put in the object store at every pass, and its
    units are most of it: 50,000 tuples took the driver 20 ms to pickle and the worker 12 ms to
    load, one joined string 0.1 ms and 3 ms (ray.cloudpickle, 2-core VM). Iterates as the tuples.
    Paths are joined with their lengths kept, not a separator: an S3 key may hold any character.
    The listed bytes are a file's size when the channel was listed (a row group's share of it
    for Parquet): what an image file's one `read` expects (`folder_files`)."""

    __slots__ = ("paths", "lengths", "groups", "sizes", "places", "drawn", "seeks", "open_units")

    def __init__(self, units, places=None, drawn: dict | None = None, open_units: int = 1, seeks: dict | None = None):
        groups = [-1 if group is None else group for _, group, _ in units]
        self._fill(
            [rel for rel, _, _ in units],
            None if all(g < 0 for g in groups) else np.array(groups, np.int64),
            np.array([size for _, _, size in units], np.int64),
            places,
            drawn,
            open_units,
            seeks,
        )

    @classmethod
    def of(
        cls,
        rels: list[str] | str,
        groups,
        sizes,
        places=None,
        drawn: dict | None = None,
        open_units: int = 1,
        seeks: dict | None = None,
        lengths=None,
    ):
        """`rels`: the paths, or (with their `lengths`) the paths already joined."""
        out = cls.__new__(cls)
        out._fill(rels, groups, sizes, places, drawn, open_units, seeks, lengths)
        return out

    def _fill(self, rels, groups, sizes, places, drawn, open_units, seeks=None, lengths=None) -> None:
        self.open_units = open_units
        """Units the task reads at a time, interleaved (`units_per_task`)."""
        self.places = None if places is None else np.asarray(places, np.int64)
        """Each unit's index in the epoch's order (`pipelines.order`): its rows' positions."""
        self.drawn = drawn or {}
        """A resumed epoch's units drawn in part: unit -> the ordinals already drawn."""
        self.seeks = seeks or {}
        """Of those, the ones a read can enter past their drawn head: unit -> (first ordinal to
        read, its `order.seek_point`)."""
        self.paths = rels if lengths is not None else "".join(rels)
        self.lengths = (
            np.asarray(lengths, np.int64) if lengths is not None else np.fromiter(map(len, rels), np.int64, len(rels))
        )
        self.groups = None if groups is None else np.asarray(groups, np.int64)
        self.sizes = np.asarray(sizes, np.int64)

    def __iter__(self):
        """Lazily: a read task's first block should not wait for all its units to be unpacked."""
        ends = np.cumsum(self.lengths).tolist()
        groups = self.groups.tolist() if self.groups is not None else itertools.repeat(-1)
        paths = self.paths
        return (
            (paths[start:end], None if group < 0 else group, size)
            for start, end, group, size in zip(
                itertools.chain((0,), ends), ends, groups, self.sizes.tolist(), strict=False
            )
        )

    def __len__(self) -> int:
        return len(self.sizes)
