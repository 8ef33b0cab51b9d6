"""Tofu's cost of one tensor at one recursive step (Wang et al., "Supporting Very Large
Models using Automatic Dataflow Graph Partitioning", EuroSys 2019, Sec 5.2 and 6), on
regions: tuples of disjoint boxes, a box an interval [start, stop) per axis, for
`planner.tofu`. A tensor's owners split it as the simulator splits a loop, into
near-equal whole parts (`near_equal_parts`), where Tofu's symbolic intervals (Sec 4.2,
Eq. 1) split evenly.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

Interval = tuple[float, float]  # [start, stop) in indices
Box = tuple[Interval, ...]
Region = tuple[Box, ...]  # disjoint boxes


def meet(a: Region, b: Region) -> Region:
    """The cells in both regions (boxes with nothing in common left out)."""
    out = []
    for x in a:
        for y in b:
            box = tuple((max(p[0], q[0]), min(p[1], q[1])) for p, q in zip(x, y, strict=True))
            if all(lo < hi for lo, hi in box):
                out.append(box)
    return tuple(out)


def size(region: Region) -> float:
    """Elements (cells) of a region."""
    return sum(math.prod(hi - lo for lo, hi in box) for box in region)


def near_equal_parts(bound: Box, axis: int, parts: int) -> list[Region]:
    """Near-equal whole parts along `axis`, larger first (the simulator's split)."""
    (lo, hi), result = bound[axis], []
    base, extra = divmod(hi - lo, parts)
    for i in range(parts):
        stop = lo + base + (i < extra)
        result.append((bound[:axis] + ((lo, stop),) + bound[axis + 1:],))
        lo = stop
    return result


def relayout(tensor: Region, writes: Sequence[Region] | None,
             reads: Sequence[Region] | None, times: int, parts: int,
             write_scale: float = 1.0) -> float:
    """Elements moved for the cells `tensor` that a group both makes and reads: the
    cheapest partition of their bounding box among `parts` owners along one axis
    (`near_equal_parts`); each owner fetches the other writers' contributions to its part
    (partial sums, halo rows; `write_scale` x), each reader (`times` operators) what it
    reads and does not own.
    `writes` None: each owner writes its own part (the loss's error); `reads` None: each
    owner reads its own part (the loss)."""
    if size(tensor) <= 0:
        return 0.0
    wrote = [meet(w, tensor) for w in writes] if writes is not None else None
    read = [meet(r, tensor) for r in reads] if reads is not None else None
    bound = tuple((min(b[a][0] for b in tensor), max(b[a][1] for b in tensor))
                  for a in range(len(tensor[0])))
    axes = [a for a, (lo, hi) in enumerate(bound) if hi - lo >= parts] or range(len(bound))
    best = math.inf
    for axis in axes:
        owned = near_equal_parts(bound, axis, parts)
        cost = 0.0
        if wrote is not None:
            cost += write_scale * (sum(map(size, wrote)) - sum(
                size(meet(w, t)) for w, t in zip(wrote, owned, strict=True)))
        if read is not None:
            cost += times * sum(size(r) - size(meet(r, t))
                                for r, t in zip(read, owned, strict=True))
        best = min(best, cost)
    return best


def outside(regions: Sequence[Region], union: Region, other: Region) -> float:
    """Elements of `regions` outside `other`, beyond the first copy of each cell (their
    union is `union`): what several workers hold or need of the same cells there."""
    return max(0.0, sum(size(r) - size(meet(r, other)) for r in regions)
               - (size(union) - size(meet(union, other))))


def tensor_cost(made: Region, needed: Region, writes: Sequence[Region],
                reads: Sequence[Region], times: int, parts: int,
                write_scale: float = 1.0) -> float:
    """Elements one step moves for one tensor in a group's graph G_0: its workers write
    `writes` (union `made`), its workers read `reads` (union `needed`), `times` operators
    reading each. Three parts: what G_0 makes and reads (`relayout`); what it makes for
    other groups, whose partial sums it reduces before they leave; what it reads of other
    groups' output, Tofu's "extra input tensors" (Sec 5.2, step 2), fetched at an earlier
    step and partitioned here among the readers like any tensor, each part where its
    reader wants it, so only cells several readers need are fetched again."""
    inside = meet(made, needed)
    return (relayout(inside, writes, reads, times, parts, write_scale)
            + write_scale * outside(writes, made, needed)
            + times * outside(reads, needed, made))
