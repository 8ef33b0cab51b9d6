"""Collective algorithms: how a step's bytes between members become messages (registry).

A step of the layout model is a matrix of bytes [src, dst]. Where a block of
k > 2 members exchange equal bytes b all-to-all (a reduce-scatter or an
all-gather among them: each member's part goes to every other), the `ring`
algorithm sends it as a ring does (Patarasuk and Yuan, "Bandwidth optimal
all-reduce algorithms for clusters of workstations", JPDC 2009): k - 1
rounds, in each of which every member sends b to its successor (members in
index order, the last to the first); a member sends round r + 1 once it has
received round r. Each member sends (k - 1) b either way, so bytes are
those of `direct` (every entry one message, all at once); the links used
and the dependencies differ. Other matrices are sent directly.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from hypar_sim.partition.hierarchy import Hierarchy
from hypar_sim.partition.steps import Message, TransferKind


@dataclass(frozen=True)
class Transfers:
    """Messages of one step as arrays (sorted by round, then source, then destination)."""

    src: np.ndarray
    dst: np.ndarray
    bytes: np.ndarray
    round: np.ndarray

    def __len__(self) -> int:
        return len(self.src)

    def messages(self, index: int, kind: TransferKind, hierarchy: Hierarchy) -> tuple[
            Message, ...]:
        """The step's messages, each with the level at which its two members meet."""
        levels = hierarchy.meeting_levels(self.src, self.dst).tolist()
        return tuple(Message(s, d, size, index, level, kind, round_) for s, d, size, level, round_
                     in zip(self.src.tolist(), self.dst.tolist(), self.bytes.tolist(), levels,
                            self.round.tolist(), strict=True))


def _sorted(src: np.ndarray, dst: np.ndarray, size: np.ndarray, round_: np.ndarray) -> Transfers:
    order = np.lexsort((dst, src, round_))
    return Transfers(src[order], dst[order], size[order].astype(np.float64), round_[order])


def direct(matrix: np.ndarray) -> Transfers:
    """Every nonzero entry one message, all in round 0."""
    src, dst = np.nonzero(matrix)
    return _sorted(src, dst, matrix[src, dst], np.zeros(len(src), dtype=np.int64))


def _blocks(matrix: np.ndarray) -> list[np.ndarray]:
    """Members connected by nonzero entries (either direction), each block sorted."""
    linked = (matrix != 0) | (matrix != 0).T
    active = np.nonzero(linked.any(axis=1))[0]
    label = np.arange(len(matrix))
    src, dst = np.nonzero(linked)
    while True:  # every member takes the smallest label among its neighbours, until stable
        lowest = label.copy()
        np.minimum.at(lowest, dst, label[src])
        if np.array_equal(lowest, label):
            break
        label = lowest
    return [active[label[active] == root] for root in np.unique(label[active])]


def ring(matrix: np.ndarray) -> Transfers:
    """Uniform all-to-all blocks of more than two members as rings; the rest direct."""
    parts = []
    rest = np.zeros_like(matrix)
    for block in _blocks(matrix):
        sub = matrix[np.ix_(block, block)]
        off = sub[~np.eye(len(block), dtype=bool)]
        if len(block) > 2 and np.all(off == off[0]) and off[0] > 0:
            k = len(block)
            rounds = np.repeat(np.arange(k - 1), k)
            src = np.tile(block, k - 1)
            dst = np.tile(np.roll(block, -1), k - 1)
            parts.append((src, dst, np.full(len(src), off[0]), rounds))
        else:
            rest[np.ix_(block, block)] = sub
    src, dst = np.nonzero(rest)
    parts.append((src, dst, rest[src, dst], np.zeros(len(src), dtype=np.int64)))
    return _sorted(*(np.concatenate([p[i] for p in parts]) for i in range(4)))


COLLECTIVES: dict[str, Callable[[np.ndarray], Transfers]] = {"ring": ring, "direct": direct}


def level_bytes(transfers: Transfers, hierarchy: Hierarchy) -> np.ndarray:
    """Bytes the transfers carry between members that meet at each level."""
    if not len(transfers):
        return np.zeros(hierarchy.levels)
    return np.bincount(hierarchy.meeting_levels(transfers.src, transfers.dst), transfers.bytes,
                       minlength=hierarchy.levels)
