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

import numpy as np

Transfer = tuple[int, int, float, int]  # src, dst, bytes, round


def direct(matrix: np.ndarray) -> list[Transfer]:
    """Every nonzero entry one message, all in round 0."""
    src, dst = np.nonzero(matrix)
    return [(int(s), int(d), float(matrix[s, d]), 0) for s, d in zip(src, dst, strict=True)]


def _blocks(matrix: np.ndarray) -> list[list[int]]:
    """Members connected by nonzero entries (either direction), each block sorted."""
    members = [int(m) for m in np.nonzero(matrix.any(axis=0) | matrix.any(axis=1))[0]]
    parent = {m: m for m in members}

    def find(m: int) -> int:
        while parent[m] != m:
            parent[m] = parent[parent[m]]
            m = parent[m]
        return m

    for s, d in zip(*np.nonzero(matrix), strict=True):
        parent[find(int(s))] = find(int(d))
    blocks: dict[int, list[int]] = {}
    for m in members:
        blocks.setdefault(find(m), []).append(m)
    return list(blocks.values())


def ring(matrix: np.ndarray) -> list[Transfer]:
    """Uniform all-to-all blocks of more than two members as rings; the rest direct."""
    transfers: list[Transfer] = []
    for block in _blocks(matrix):
        sub = matrix[np.ix_(block, block)]
        off = sub[~np.eye(len(block), dtype=bool)]
        if len(block) > 2 and np.all(off == off[0]) and off[0] > 0:
            for round_ in range(len(block) - 1):
                transfers += [(m, block[(i + 1) % len(block)], float(off[0]), round_)
                              for i, m in enumerate(block)]
        else:
            rows = np.zeros_like(matrix)
            rows[np.ix_(block, block)] = sub
            transfers += direct(rows)
    return sorted(transfers, key=lambda t: (t[3], t[0], t[1]))


COLLECTIVES: dict[str, Callable[[np.ndarray], list[Transfer]]] = {"ring": ring, "direct": direct}
