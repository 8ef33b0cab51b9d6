"""What members send each other: a [src, dst] matrix of elements or bytes, kept as its
nonzero entries and its uniform groups (`Moved`), what the redistribution rule
(`partition.redistribute`) and every collective and cost read."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from hypar_sim.resources import check_memory

#: Up to this many member pairs (4,096 members), pairs' sums are gathered in one array of
#: them all (128 MiB of float64 at most) where the entries are at least a sixteenth of the
#: pairs; otherwise by sorting the pairs that occur.
_DENSE_SUMS = 4096 * 4096


@dataclass(frozen=True, eq=False)
class Block:
    """A uniform all-to-all among a group: every member sends `amount` to every other
    (k (k - 1) entries of a matrix, kept as the group: what a reduce-scatter or an
    all-gather among k members is, whatever k)."""

    members: np.ndarray  # int64, sorted
    amount: float

    @property
    def entries(self) -> int:
        k = len(self.members)
        return k * (k - 1)

    def pairs(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(src, dst, amount) of its k (k - 1) entries, sorted by src, then dst."""
        k = len(self.members)
        src = np.repeat(self.members, k)
        dst = np.tile(self.members, k)
        off = src != dst
        return src[off], dst[off], np.full(int(off.sum()), self.amount)


def merge_blocks(blocks: Sequence[Block]) -> tuple[Block, ...]:
    """Blocks of the same members as one (amounts added in their order), first seen first."""
    merged: dict[bytes, Block] = {}
    for block in blocks:
        key = block.members.tobytes()
        seen = merged.get(key)
        merged[key] = block if seen is None else Block(seen.members, seen.amount + block.amount)
    return tuple(merged.values())


@dataclass(frozen=True)
class Moved:
    """What members send each other: the nonzero (src, dst) entries of a [src, dst] matrix
    of elements or bytes, sorted by src, then dst (a matrix of thousands of members is
    mostly zeros: a relayout pairs each member with a few others), plus `blocks`: uniform
    all-to-alls kept as their groups (never k (k - 1) entries). The matrix is the sum of
    both; `entries()` gives it as entries alone."""

    members: int
    src: np.ndarray  # int64
    dst: np.ndarray  # int64
    amount: np.ndarray  # float64
    blocks: tuple[Block, ...] = ()

    @classmethod
    def from_dense(cls, matrix: np.ndarray) -> Moved:
        src, dst = np.nonzero(matrix)
        return cls(len(matrix), src.astype(np.int64), dst.astype(np.int64),
                   matrix[src, dst].astype(np.float64))

    @classmethod
    def none(cls, members: int) -> Moved:
        empty = np.zeros(0, dtype=np.int64)
        return cls(members, empty, empty, np.zeros(0))

    def entries(self) -> Moved:
        """The same matrix with its blocks as entries (summed with the others)."""
        if not self.blocks:
            return self
        check_memory(40.0 * (len(self.src) + sum(block.entries for block in self.blocks)),
                     f"a redistribution among {self.members:,} members (groups written out "
                     "as pairs of members)", "use --traffic-model layout_levels (level by level) "
                     "or paper, or fewer accelerators")
        parts = [block.pairs() for block in self.blocks]
        return Moved.summed(self.members, np.concatenate([self.src, *(p[0] for p in parts)]),
                            np.concatenate([self.dst, *(p[1] for p in parts)]),
                            np.concatenate([self.amount, *(p[2] for p in parts)]))

    def dense(self) -> np.ndarray:
        """The [src, dst] matrix."""
        out = np.zeros((self.members, self.members))
        out[self.src, self.dst] = self.amount
        for block in self.blocks:
            src, dst, amount = block.pairs()
            out[src, dst] += amount
        return out

    def sum(self) -> float:
        return float(self.amount.sum()) + sum(block.amount * block.entries
                                               for block in self.blocks)

    def relabelled(self, members: int, place) -> Moved:
        """The matrix among `members` members, member m becoming `place(m)` (a one-to-one
        map of arrays of members; entries sorted again by src, then dst)."""
        src, dst = place(self.src), place(self.dst)
        order = np.lexsort((dst, src))
        return Moved(members, src[order], dst[order], self.amount[order],
                     tuple(Block(np.sort(place(block.members)), block.amount)
                           for block in self.blocks))

    def __mul__(self, scale: float) -> Moved:
        return Moved(self.members, self.src, self.dst, self.amount * scale,
                     tuple(Block(block.members, block.amount * scale) for block in self.blocks))

    __rmul__ = __mul__

    @classmethod
    def summed(cls, members: int, src: np.ndarray, dst: np.ndarray,
               amount: np.ndarray) -> Moved:
        """Entries with the same (src, dst) added up, in their order; zeros dropped."""
        keys = src * members + dst
        # summed in place where the pairs are many: faster than sorting the keys; where
        # they are few among many members, scanning every pair costs more than the sort
        if members * members <= min(_DENSE_SUMS, 16 * len(keys)):
            total = np.bincount(keys, amount, minlength=members * members)
            keys = np.flatnonzero(total)
            total = total[keys]
        else:
            keys, inverse = np.unique(keys, return_inverse=True)
            total = np.bincount(inverse.reshape(-1), amount, minlength=len(keys))
            keys, total = keys[total != 0], total[total != 0]
        return cls(members, keys // members, keys % members, total)

    def __add__(self, other: Moved) -> Moved:
        """Entry by entry (entries of both added; blocks of the same members merged)."""
        pairs = Moved.summed(self.members, np.concatenate([self.src, other.src]),
                             np.concatenate([self.dst, other.dst]),
                             np.concatenate([self.amount, other.amount]))
        blocks = merge_blocks(self.blocks + other.blocks)
        return pairs if not blocks else Moved(pairs.members, pairs.src, pairs.dst,
                                              pairs.amount, blocks)
