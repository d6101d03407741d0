"""A channel's (relative path, size) pairs, packed: one joined string and two numpy arrays.

A listing is held by the driver for the whole job and travels from each host's lister task to
it. As a list of tuples, 1.28 million image files were three Python objects each (about 200
bytes a file with the tuple and the int, before any copy); packed they are the path's characters
plus 16 bytes, and pickling one string and two arrays costs milliseconds instead of seconds.
`FileList` still behaves as the sequence of tuples the readers iterate: `len`, iteration,
indexing and slicing (a slice is a `FileList` again), and equality with any such sequence.
Paths are joined with their end offsets kept, not a separator: an S3 key may hold any character.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence


class FileList(Sequence):
    __slots__ = ("paths", "ends", "sizes")

    def __init__(self, paths: str, ends, sizes):
        """`paths` joined; `ends[i]`: where path i ends in it; `sizes[i]`: its size in bytes."""
        self.paths, self.ends, self.sizes = paths, ends, sizes

    @classmethod
    def of(cls, rels: Sequence[str], sizes: Iterable[int] | int = 0) -> FileList:
        """Pack `rels` with their `sizes` (one int: the same size for every file)."""
        import numpy as np

        ends = np.cumsum(np.fromiter(map(len, rels), dtype=np.int64, count=len(rels)))
        if isinstance(sizes, int):
            packed = np.full(len(rels), sizes, dtype=np.int64)
        else:
            packed = np.fromiter(sizes, dtype=np.int64, count=len(rels))
        return cls("".join(rels), ends, packed)

    @classmethod
    def from_pairs(cls, pairs: Iterable[tuple[str, int]]) -> FileList:
        pairs = list(pairs)
        return cls.of([rel for rel, _ in pairs], [size for _, size in pairs])

    @classmethod
    def concat(cls, lists: list[FileList]) -> FileList:
        """The files of `lists` (each a `FileList` or pairs), one after another."""
        import numpy as np

        lists = [f if isinstance(f, FileList) else FileList.from_pairs(f) for f in lists]
        if len(lists) == 1:
            return lists[0]
        if not lists:
            return cls.of([])
        offsets = np.cumsum([0] + [len(f.paths) for f in lists[:-1]])
        return cls(
            "".join(f.paths for f in lists),
            np.concatenate([f.ends + o for f, o in zip(lists, offsets, strict=False)]),
            np.concatenate([f.sizes for f in lists]),
        )

    def __len__(self) -> int:
        return len(self.sizes)

    def rels(self) -> Iterator[str]:
        """The relative paths, in order."""
        paths, start = self.paths, 0
        for end in self.ends.tolist():
            yield paths[start:end]
            start = end

    def __iter__(self) -> Iterator[tuple[str, int]]:
        return zip(self.rels(), self.sizes.tolist(), strict=False)

    def __getitem__(self, index):
        if isinstance(index, slice):
            picked = range(len(self))[index]
            if picked.step == 1:  # a contiguous run: cut the string once
                lo, hi = picked.start, max(picked.start, picked.stop)
                base = int(self.ends[lo - 1]) if lo > 0 else 0
                top = int(self.ends[hi - 1]) if hi > lo else base
                return FileList(self.paths[base:top], self.ends[lo:hi] - base, self.sizes[lo:hi].copy())
            return FileList.of([self._rel(i) for i in picked], self.sizes[index].tolist())
        i = range(len(self))[index]
        return self._rel(i), int(self.sizes[i])

    def _rel(self, i: int) -> str:
        return self.paths[int(self.ends[i - 1]) if i > 0 else 0 : int(self.ends[i])]

    def total_size(self) -> int:
        return int(self.sizes.sum())

    def __eq__(self, other) -> bool:
        if isinstance(other, FileList):
            return (
                self.paths == other.paths
                and len(self) == len(other)
                and bool((self.ends == other.ends).all())
                and bool((self.sizes == other.sizes).all())
            )
        if isinstance(other, Sequence) and not isinstance(other, str):
            return len(self) == len(other) and all(a == tuple(b) for a, b in zip(self, other, strict=False))
        return NotImplemented

    # No __hash__: defining __eq__ alone leaves the class unhashable (its __hash__ is None).

    def __repr__(self) -> str:
        head = ", ".join(repr(pair) for pair in self[:3])
        return f"FileList([{head}{', ...' if len(self) > 3 else ''}], {len(self)} files)"
