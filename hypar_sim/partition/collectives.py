"""Collective algorithms: how a step's bytes between members become messages (registry).

A step of the layout model is bytes between members (`moved.Moved`: the
nonzero entries of a [src, dst] matrix). Where a block of k > 2 members
exchange equal bytes b all-to-all (a reduce-scatter or an all-gather among
them: each member's part goes to every other), the `ring` algorithm sends it
as a ring does (Patarasuk and Yuan, "Bandwidth optimal
all-reduce algorithms for clusters of workstations", JPDC 2009): k - 1
rounds, in each of which every member sends b to its successor (members in
index order, the last to the first); a member sends round r + 1 once it has
received round r. Each member sends (k - 1) b either way, so bytes are
those of `direct` (every entry one message, all at once); the links used
and the dependencies differ. Other matrices are sent directly.

The `levels` algorithm sends such a block level by level instead, where the
block spans whole levels of the hierarchy (BlueConnect: Cho et al.,
"BlueConnect: Decomposing all-reduce for deep learning on heterogeneous network
hierarchy", SysML 2019; with two-way levels, the recursive halving of Thakur,
Rabenseifner and Gropp, IJHPCA 2005): a reduce-scatter runs one stage per
level of the block, the lowest level first, each a ring among the s_l members
of a level group in which every member passes on the part of its data that
one sub-group will own; an all-gather runs the same stages top level first. A
stage at level l takes s_l - 1 rounds of b k / P_l, with P_l the product of
the block's level sizes at l and below, so each member again sends (k - 1) b
in all: bytes are those of `ring` and `direct`, in sum(s_l - 1) rounds where
a ring takes k - 1 (a thousand members on two-way levels: 10 rounds, not
1023). Blocks that do not span whole levels are sent as rings.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from hypar_sim.partition.hierarchy import Hierarchy
from hypar_sim.partition.moved import Moved
from hypar_sim.partition.steps import StepMessages, TransferKind


@dataclass(frozen=True)
class Transfers:
    """Messages of one step as arrays (sorted by round, then source, then destination). A
    message of `repeats` n > 1 stands for n equal messages in rounds `round` .. `round` +
    n - 1 (a ring's k - 1 rounds are one row per member, not k (k - 1) rows)."""

    src: np.ndarray
    dst: np.ndarray
    bytes: np.ndarray
    round: np.ndarray
    repeats: np.ndarray
    group: np.ndarray  # the ring each row is part of (numbered in the step), -1: none

    def __len__(self) -> int:
        return len(self.src)

    @property
    def sent_bytes(self) -> np.ndarray:
        """Bytes of each row, all its rounds."""
        return self.bytes * self.repeats

    def messages(self, index: int, kind: TransferKind, hierarchy: Hierarchy) -> StepMessages:
        """The step's messages, each with the level at which its two members meet."""
        return StepMessages(index, kind, self.src, self.dst, self.bytes,
                            hierarchy.meeting_levels(self.src, self.dst), self.round,
                            repeats=self.repeats, group=self.group)


def _sorted(src: np.ndarray, dst: np.ndarray, size: np.ndarray, round_: np.ndarray,
            repeats: np.ndarray, group: np.ndarray) -> Transfers:
    order = np.lexsort((dst, src, round_))
    return Transfers(src[order], dst[order], size[order].astype(np.float64), round_[order],
                     repeats[order].astype(np.int64), group[order].astype(np.int64))


def _once(count: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Rounds, repeats and groups (none) of `count` messages sent once, in round 0."""
    return (np.zeros(count, dtype=np.int64), np.ones(count, dtype=np.int64),
            np.full(count, -1, dtype=np.int64))


def direct(moved: Moved, hierarchy: Hierarchy | None = None, reduce: bool = True) -> Transfers:
    """Every nonzero entry one message, all in round 0."""
    moved = moved.entries()
    return _sorted(moved.src, moved.dst, moved.amount, *_once(len(moved.src)))


def _blocks(moved: Moved) -> tuple[list[np.ndarray], np.ndarray]:
    """Members connected by nonzero entries (either direction), each block sorted, and
    every member's block label (its smallest member)."""
    src = np.concatenate([moved.src, moved.dst])
    dst = np.concatenate([moved.dst, moved.src])
    active = np.flatnonzero(np.bincount(src, minlength=moved.members))  # sorted
    label = np.arange(moved.members)
    while True:  # every member takes the smallest label among its neighbours, until stable
        lowest = label.copy()
        np.minimum.at(lowest, dst, label[src])
        if np.array_equal(lowest, label):
            break
        label = lowest
    roots = active[label[active] == active]  # a block's smallest member labels it
    return [active[label[active] == root] for root in roots], label


def _uniform(amounts: np.ndarray, block: np.ndarray) -> float:
    """b where the block's members all exchange b > 0 with each other (k > 2; `amounts`
    are the entries sent within the block), else 0."""
    k = len(block)
    uniform = k > 2 and len(amounts) == k * (k - 1) and np.all(amounts == amounts[0])
    return float(amounts[0]) if uniform and amounts[0] > 0 else 0.0


def _ring_part(block: np.ndarray, size: float) -> tuple[np.ndarray, ...]:
    """k - 1 rounds in each of which every member sends `size` to its successor: one row
    per member, repeated k - 1 times (one ring: every row's ring 0)."""
    k = len(block)
    return (block, np.concatenate((block[1:], block[:1])), np.full(k, size),
            np.zeros(k, dtype=np.int64),
            np.full(k, k - 1, dtype=np.int64), np.zeros(k, dtype=np.int64))


def _spanned_levels(block: np.ndarray, hierarchy: Hierarchy) -> tuple[int, ...] | None:
    """The levels along which the block's members differ, if the block is every member
    that agrees with its first outside them; else None."""
    coords = np.stack([(block // stride) % size
                       for stride, size in zip(hierarchy.strides, hierarchy.sizes, strict=True)])
    levels = tuple(h for h in range(hierarchy.levels) if np.any(coords[h] != coords[h, 0]))
    spans = len(block) == math.prod(hierarchy.sizes[h] for h in levels)
    return levels if spans else None


def _level_stages(block: np.ndarray, size: float, levels: tuple[int, ...], hierarchy: Hierarchy,
                  reduce: bool) -> tuple[np.ndarray, ...]:
    """A uniform block as one stage per level (bottom first to reduce, top first to
    gather), each a ring of the level's s members (s - 1 rounds, each member sending
    size * k / P_l to its successor in the level group: one row per member, repeated)."""
    k = len(block)
    below = {}  # P_l: the product of the block's level sizes at l and below
    product = 1
    for level in reversed(levels):
        product *= hierarchy.sizes[level]
        below[level] = product
    parts, first = [], 0  # the stage's first round
    for level in (reversed(levels) if reduce else levels):
        stride, count = hierarchy.strides[level], hierarchy.sizes[level]
        own = (block // stride) % count
        successor = block + ((own + 1) % count - own) * stride
        ring = len(parts) * hierarchy.members + block - own * stride  # its level group's first
        parts.append((block, successor, np.full(k, size * k / below[level]),
                      np.full(k, first), np.full(k, count - 1), ring))
        first += count - 1
    return tuple(np.concatenate([part[i] for part in parts]) for i in range(6))


def _collective(moved: Moved, uniform_block) -> Transfers:
    """Every block the matrix keeps as a group (`Moved.blocks`) as `uniform_block(block,
    b)` sends it, each on its own, even where groups share members (a fused gradient bucket
    of nodes reduced over different groups, a layer's weights and bias reduced over
    different groups: each group runs its own collective, as a data-parallel framework runs
    one per process group, PyTorch DDP's buckets being per group: Li et al., VLDB 2020,
    section 3.2.3); the other entries are searched for uniform blocks, sent likewise, and
    the rest sent directly. Each ring (a level stage's every level group's own) is numbered
    (`Transfers.group`): its members receive their parts together (`sim.engine`)."""
    parts = [uniform_block(block.members, block.amount) for block in moved.blocks]
    if moved.blocks:
        moved = Moved(moved.members, moved.src, moved.dst, moved.amount)
    blocks, label = _blocks(moved)
    kept = np.ones(len(moved.src), dtype=bool)
    by_block = label[moved.src]
    order = np.argsort(by_block, kind="stable")  # each block's entries, one run each
    runs = by_block[order]
    roots = [block[0] for block in blocks]
    starts = np.searchsorted(runs, roots, side="left").tolist()
    ends = np.searchsorted(runs, roots, side="right").tolist()
    for block, start, end in zip(blocks, starts, ends, strict=True):
        inside = order[start:end]
        size = _uniform(moved.amount[inside], block)
        sent = uniform_block(block, size) if size else None
        if sent is not None:
            parts.append(sent)
            kept[inside] = False
    if parts:  # each ring of each collective its own number
        span = max(int(part[5].max()) for part in parts) + 1
        rings = np.concatenate([index * span + part[5] for index, part in enumerate(parts)])
        numbers = np.unique(rings, return_inverse=True)[1].reshape(-1)
        parts = [(*part[:5], number) for part, number in zip(
            parts, np.split(numbers, np.cumsum([len(part[0]) for part in parts])[:-1]),
            strict=True)]
    parts.append((moved.src[kept], moved.dst[kept], moved.amount[kept],
                  *_once(int(kept.sum()))))
    return _sorted(*(np.concatenate([p[i] for p in parts]) for i in range(6)))


def ring(moved: Moved, hierarchy: Hierarchy | None = None, reduce: bool = True) -> Transfers:
    """Uniform all-to-all blocks of more than two members as rings; the rest direct."""
    return _collective(moved, _ring_part)


def levels(moved: Moved, hierarchy: Hierarchy, reduce: bool = True) -> Transfers:
    """Uniform all-to-all blocks that span whole levels one stage per level (bottom level
    first where `reduce`, top first to gather); other uniform blocks as rings; the rest
    direct."""
    def stages(block: np.ndarray, size: float) -> tuple[np.ndarray, ...]:
        spanned = _spanned_levels(block, hierarchy)
        if spanned is None:
            return _ring_part(block, size)
        return _level_stages(block, size, spanned, hierarchy, reduce)

    return _collective(moved, stages)


#: A collective: (bytes between members, hierarchy, whether the step reduces) -> messages.
Collective = Callable[[Moved, Hierarchy, bool], Transfers]
COLLECTIVES: dict[str, Collective] = {"ring": ring, "levels": levels, "direct": direct}


def level_bytes(transfers: Transfers, hierarchy: Hierarchy) -> np.ndarray:
    """Bytes the transfers carry between members that meet at each level."""
    if not len(transfers):
        return np.zeros(hierarchy.levels)
    return np.bincount(hierarchy.meeting_levels(transfers.src, transfers.dst),
                       transfers.sent_bytes, minlength=hierarchy.levels)
