"""The one redistribution rule: what each member needs minus what it holds.

A tensor of a few axes is held as *contributions*: member a computed values
for a region B_a (a list of boxes). Where regions of several members overlap,
each holds a partial sum (an in-split layer's output, an out-split layer's
input error, a spatial split's halo rows, a batch-split layer's weight
gradient). Members *need* regions W_b. The rule, per element x with
contributors S_x and needers W_x:

1. reduce: if S_x has more than one member, x is reduced at one owner; the
   owners of a block of such elements are the contributors that need it
   (or all contributors, if none does), each owning an equal part: a
   reduce-scatter straight into the layout the consumer needs. Every other
   contributor sends its partial of each part to that part's owner:
   |S_x| - 1 elements per element.
2. gather: every needer that does not own x receives it from its owner(s).
   An element nobody computed (an input row a strided convolution never
   reads has zero error) costs nothing: its needer knows it is zero.

Bytes in all: sum_a |B_a| - |T| + sum_b |W_b| - |union_a (B_a & W_a)|. With
a ring reduce-scatter or all-gather each member sends (k-1)/k of the data,
the same total. All regions are cut into cells at every box edge (a cell
has one contributor set and one needer set), so the counts are exact.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from hypar_sim.partition.member_boxes import MemberBoxes
from hypar_sim.partition.moved import Block, Moved, merge_blocks
from hypar_sim.resources import check_memory

Interval = tuple[int, int]
Box = tuple[Interval, ...]  # one interval per axis
Region = tuple[Box, ...]  # disjoint boxes
#: Every member's region: as tuples, or as arrays where each is one box (`MemberBoxes`).
Regions = Sequence[Region] | MemberBoxes


@dataclass(frozen=True)
class Grid:
    """Cells of a tensor: the atoms of every axis and each cell's volume (elements)."""

    edges: tuple[np.ndarray, ...]  # per axis, sorted unique cut points (0 and extent included)
    volume: np.ndarray  # [cells] elements per cell (flattened, C order)

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(len(e) - 1 for e in self.edges)


def _bounds(regions: Regions, axes: int) -> tuple[np.ndarray, np.ndarray]:
    """Every box of every region: (its member, [boxes, axes, 2] bounds)."""
    if isinstance(regions, MemberBoxes):
        return regions.owned()
    owners = np.repeat(np.arange(len(regions), dtype=np.int64),
                       [len(region) for region in regions])
    boxes = [box for region in regions for box in region]
    return owners, np.array(boxes, dtype=np.int64).reshape(len(boxes), axes, 2)


def make_grid(extents: Sequence[int], bounds: Sequence[np.ndarray]) -> Grid:
    """The coarsest grid on which every box (`bounds`: arrays [boxes, axes, 2], `_bounds`)
    is a union of cells."""
    every = np.concatenate(bounds) if bounds else np.zeros((0, len(extents), 2), np.int64)
    # sorted(set()) rather than np.unique, whose first call imports numpy.ma (9 ms a process)
    edges = tuple(np.array(sorted({0, int(extent), *every[:, axis].reshape(-1).tolist()}),
                           dtype=np.int64) for axis, extent in enumerate(extents))
    volume = np.ones(1, dtype=np.float64)
    for e in edges:
        volume = np.multiply.outer(volume, np.diff(e).astype(np.float64)).reshape(-1)
    return Grid(edges, volume)


@dataclass(frozen=True)
class Cover:
    """Which members cover which cells, with a weight each (1 for a region's cover; a
    holder's fraction after a reduce): pairs sorted by cell, then member. Most cells are
    covered by a few of many members, so pairs are kept, not a [members, cells] array."""

    members: int
    cells: int
    member: np.ndarray  # int64 [pairs]
    cell: np.ndarray  # int64 [pairs]
    weight: np.ndarray  # float64 [pairs]

    @classmethod
    def of(cls, members: int, cells: int, member: np.ndarray, cell: np.ndarray,
           weight: np.ndarray | None = None) -> Cover:
        order = np.lexsort((member, cell))
        weight = np.ones(len(member)) if weight is None else np.asarray(weight, np.float64)
        return cls(members, cells, member[order], cell[order], weight[order])

    def dense(self) -> np.ndarray:
        """[members, cells] weights."""
        out = np.zeros((self.members, self.cells))
        out[self.member, self.cell] = self.weight
        return out

    def keys(self) -> np.ndarray:
        return self.cell * self.members + self.member

    def where(self, mask: np.ndarray) -> Cover:
        """The pairs of `mask` (their order kept)."""
        return Cover(self.members, self.cells, self.member[mask], self.cell[mask],
                     self.weight[mask])


def masks(grid: Grid, members: int, owners: np.ndarray, bounds: np.ndarray) -> Cover:
    """The cells each of `members` covers with its boxes (`_bounds`: each box's owner and
    bounds): every box's cells, enumerated (a box of one cell, the common case, its first)."""
    shape = grid.shape
    cells = math.prod(shape)
    if not len(owners):
        empty = np.zeros(0, dtype=np.int64)
        return Cover.of(members, cells, empty, empty)
    axes = len(shape)
    lo = np.empty((len(owners), axes), dtype=np.int64)
    spans = np.empty((len(owners), axes), dtype=np.int64)
    for axis, cuts in enumerate(grid.edges):  # atoms along each axis, per box
        lo[:, axis] = cuts.searchsorted(bounds[:, axis, 0])
        spans[:, axis] = cuts.searchsorted(bounds[:, axis, 1]) - lo[:, axis]
    np.maximum(spans, 0, out=spans)
    strides = np.ones(axes, dtype=np.int64)  # the last axis varies fastest (C order)
    for axis in range(axes - 2, -1, -1):
        strides[axis] = strides[axis + 1] * shape[axis + 1]
    first = lo @ strides  # each box's first cell
    sizes = spans.prod(axis=1)
    if (sizes == 1).all():
        member, cell = owners, first
    else:
        box = np.repeat(np.arange(len(owners)), sizes)
        rest = np.arange(int(sizes.sum())) - np.repeat(sizes.cumsum() - sizes, sizes)
        cell = first[box]
        for axis in range(axes - 1, -1, -1):
            span = spans[box, axis]
            cell += rest % span * strides[axis]
            rest //= span
        member = owners[box]
    order = (cell * members + member).argsort(kind="stable")  # by cell, then member
    return Cover(members, cells, member[order], cell[order], np.ones(len(member)))


def _without_diagonal(moved: Moved) -> Moved:
    """What a member keeps for itself is not moved."""
    off = moved.src != moved.dst
    return Moved(moved.members, moved.src[off], moved.dst[off], moved.amount[off])


def member_products(left: Cover | np.ndarray, right: Cover | np.ndarray) -> Moved:
    """left @ right.T over the cells (arrays [members, cells], or covers; `right`'s weights
    are ignored: it says who): the elements each member sends each other member. Where few
    members touch each cell (most relayouts: the pairs far fewer than members^2 x cells)
    the products are summed cell by cell over the covering pairs only; otherwise as one
    dense product."""
    if isinstance(left, np.ndarray):
        cell_left, member_left = np.nonzero(left.T)
        left = Cover(left.shape[0], left.shape[1], member_left, cell_left,
                     left.T[cell_left, member_left].astype(np.float64))
    if isinstance(right, np.ndarray):
        cell_right, member_right = np.nonzero(right.T)
        right = Cover(right.shape[0], right.shape[1], member_right, cell_right,
                      np.ones(len(cell_right)))
    members, cells = left.members, left.cells
    per_cell = np.bincount(right.cell, minlength=cells)
    repeats = per_cell[left.cell]
    pairs = int(repeats.sum())
    dense = pairs * 8 > members * members * max(cells, 1)
    check_memory(8.0 * (members * members + 2 * members * cells) if dense else 40.0 * pairs,
                 f"a redistribution among {members:,} members (pairs of members as rows of "
                 "messages)", "use --traffic-model layout_levels (level by level) or paper, "
                 "or fewer accelerators")
    if dense:
        return Moved.from_dense(left.dense() @ (right.dense() != 0).T.astype(np.float64))
    first = np.cumsum(per_cell) - per_cell  # each cell's first pair in `right`
    within = np.arange(pairs) - np.repeat(np.cumsum(repeats) - repeats, repeats)
    receiver = right.member[np.repeat(first[left.cell], repeats) + within]
    sender = np.repeat(left.member, repeats)
    return Moved.summed(members, sender, receiver, np.repeat(left.weight, repeats))


def _found(values: np.ndarray, pool: np.ndarray) -> np.ndarray:
    """[values] whether each value occurs in `pool`: np.isin by a binary search, as
    np.isin's sorting path imports numpy.ma on first use (9 ms of a `plan` process)."""
    if not len(pool):
        return np.zeros(len(values), dtype=bool)
    pool = np.sort(pool)
    return pool[np.searchsorted(pool, values).clip(max=len(pool) - 1)] == values


def _uniform_cells(left: Cover, right: Cover) -> tuple[tuple[Block, ...], Cover, Cover]:
    """Cells that `left` and `right` cover with the same k > 2 members and `left` with one
    positive weight: each an all-to-all among them, kept as a block (cells of the same
    members merged, in cell order); (blocks, left and right without those cells)."""
    cells = left.cells
    count = np.bincount(left.cell, minlength=cells)
    candidate = (count == np.bincount(right.cell, minlength=cells)) & (count > 2)
    if not candidate.any():
        return (), left, right
    inside_left, inside_right = candidate[left.cell], candidate[right.cell]
    order = np.lexsort((left.member[inside_left], left.cell[inside_left]))
    member = left.member[inside_left][order]
    weight = left.weight[inside_left][order]
    other = np.lexsort((right.member[inside_right], right.cell[inside_right]))
    same = member == right.member[inside_right][other]
    cells_in = np.flatnonzero(candidate)
    starts = np.cumsum(count[cells_in]) - count[cells_in]
    first = np.repeat(weight[starts], count[cells_in])
    repeated = np.r_[False, member[1:] == member[:-1]]  # a member twice in a cell: no block
    repeated[starts] = False
    block = (np.logical_and.reduceat(same & (weight == first) & ~repeated, starts)
             & (weight[starts] > 0))
    if not block.any():
        return (), left, right
    blocks = merge_blocks([Block(member[start:start + count[c]], float(weight[start]))
                           for c, start in zip(cells_in[block].tolist(),
                                               starts[block].tolist(), strict=True)])
    kept = np.ones(cells, dtype=bool)
    kept[cells_in[block]] = False
    return blocks, left.where(kept[left.cell]), right.where(kept[right.cell])


def _exchanged(left: Cover, right: Cover) -> Moved:
    """What members send each other (`member_products` without what a member keeps), with
    the cells where the same k > 2 members give and take alike as blocks: a gradient's
    all-reduce among thousands of members is a group, not millions of pairs."""
    blocks, left, right = _uniform_cells(left, right)
    moved = _without_diagonal(member_products(left, right))
    return Moved(moved.members, moved.src, moved.dst, moved.amount, blocks) if blocks \
        else moved


def reduce_stage(contrib: Cover, need: Cover, volume: np.ndarray) -> tuple[Moved, Cover]:
    """(elements [src, dst] of the reduce-scatter, holders: each owner's fraction of each
    cell). A cell's owners are its contributors that need it, or all its contributors if
    none does; each owns an equal part."""
    both = _found(contrib.keys(), need.keys())
    claimed = np.zeros(contrib.cells, dtype=bool)
    claimed[contrib.cell[both]] = True
    owning = both | ~claimed[contrib.cell]
    owner_member, owner_cell = contrib.member[owning], contrib.cell[owning]
    count = np.bincount(owner_cell, minlength=contrib.cells).astype(np.float64)
    share = np.divide(volume, count, out=np.zeros_like(volume), where=count > 0)
    owners = Cover(contrib.members, contrib.cells, owner_member, owner_cell,
                   np.ones(len(owner_cell)))
    weighted = Cover(contrib.members, contrib.cells, contrib.member, contrib.cell,
                     share[contrib.cell])
    moved = _exchanged(weighted, owners)
    return moved, Cover(contrib.members, contrib.cells, owner_member, owner_cell,
                        1.0 / count[owner_cell])


def gather_stage(holders: Cover, need: Cover, volume: np.ndarray) -> Moved:
    """Elements [src, dst] that needers receive from the holders of what they lack."""
    weighted = Cover(holders.members, holders.cells, holders.member, holders.cell,
                     holders.weight * volume[holders.cell])
    return _exchanged(weighted, need)


@dataclass(frozen=True)
class Stages:
    """One redistribution: elements moved [src, dst] by the reduce and the gather stage,
    the fraction of each cell every member holds after the reduce, the contributions, the
    grid's cell volumes, and (with copies: `_with_copies`) each universe's holders and
    contributions."""

    reduce: Moved
    gather: Moved
    holders: Cover
    contrib: Cover
    volume: np.ndarray  # [cells]
    universes: tuple[tuple[Cover, Cover], ...] = ()

    def returned(self) -> Moved:
        """Elements [src, dst] of the reduced values' error sent back to the contributors
        (the loss's: every contributor needs the error of what it computed)."""
        if not self.universes:
            return gather_stage(self.holders, self.contrib, self.volume)
        total = Moved.none(self.contrib.members)
        for holders, contrib in self.universes:
            total = total + gather_stage(holders, contrib, self.volume)
        return total


def redistribute(extents: Sequence[int], contributions: Regions,
                 needs: Regions | None, replicas: np.ndarray | None = None) -> Stages:
    """Both stages for one tensor. `needs` None: nobody needs it in a given layout (the
    loss takes the reduced values wherever the reduction leaves them). `replicas`: each
    member's replica class (a member whose contribution is a copy of its class's first
    member's, the node computed whole at a `replicate` level): see `_with_copies`."""
    return _stages(*_covers(extents, contributions, needs), replicas)


def redistribute_both_ways(extents: Sequence[int], made: Regions,
                           read: Regions, made_replicas: np.ndarray | None,
                           read_replicas: np.ndarray | None) -> tuple[Stages, Stages]:
    """(`redistribute(extents, made, read, made_replicas)`, `redistribute(extents, read,
    made, read_replicas)`): an edge's forward pass and its error's way back, on the one grid
    both cut (the same cells, the two covers swapping roles)."""
    contrib, need, volume = _covers(extents, made, read)
    return (_stages(contrib, need, volume, made_replicas),
            _stages(need, contrib, volume, read_replicas))


def totals_both_ways(extents: Sequence[int], made: Regions, read: Regions,
                     made_replicas: np.ndarray | None, read_replicas: np.ndarray | None
                     ) -> tuple[tuple[float, float], tuple[float, float]]:
    """The elements `redistribute_both_ways` moves, each stage's summed ((forward reduce,
    gather), (backward reduce, gather)), in closed form (`stage_totals`): what a cost in
    bytes needs, without the matrices."""
    contrib, need, volume = _covers(extents, made, read)
    return (stage_totals(contrib, need, volume, made_replicas),
            stage_totals(need, contrib, volume, read_replicas))


def all_reduce_totals(extents: Sequence[int], regions: Regions,
                      replicas: np.ndarray | None) -> tuple[float, float]:
    """(reduce, gather) elements of `redistribute(extents, regions, regions, replicas)`, an
    all-reduce, in closed form (`stage_totals`). A loss's (`redistribute` with no needs,
    then `Stages.returned`) moves the same: its reduce leaves each cell with the same
    owners (every contributor), and its error goes back to every contributor."""
    contrib, need, volume = _covers(extents, regions, regions)
    return stage_totals(contrib, need, volume, replicas)


def stage_totals(contrib: Cover, need: Cover, volume: np.ndarray,
                 replicas: np.ndarray | None) -> tuple[float, float]:
    """(elements of the reduce stage, of the gather stage): the sums of `_stages`' matrices,
    cell by cell. A cell of v elements that |S| members contributed and |W| need, B of
    them both, is reduced at its owners (S & W, or S if B is empty): every other
    contributor sends each owner its part, v (|S| - 1) in all; then each needer receives
    what its owners do not hold, v (|W| - 1) if B is not empty, else v |W| (nothing where
    no member contributed). With copies (`_with_copies`), in each universe apart."""
    cells = contrib.cells
    universe = _ranks(replicas) if _has_copies(replicas) else \
        np.zeros(contrib.members, np.int64)
    size = (int(universe.max()) + 1) * cells
    made = universe[contrib.member] * cells + contrib.cell  # (universe, cell) of each pair
    contributors = np.bincount(made, minlength=size)
    needers = np.bincount(universe[need.member] * cells + need.cell, minlength=size)
    both = np.bincount(made[_found(contrib.keys(), need.keys())], minlength=size)
    volumes = np.tile(volume, size // cells)
    reduced = float(np.dot(volumes, np.maximum(contributors - 1, 0)))
    gathered = float(np.dot(volumes, np.where(contributors > 0, needers - (both > 0), 0)))
    return reduced, gathered


def _covers(extents: Sequence[int], contributions: Regions,
            needs: Regions | None) -> tuple[Cover, Cover, np.ndarray]:
    """(the contributions' cover, the needs', the cells' volumes) on the grid both cut; the
    same regions given as both (an all-reduce) covered once."""
    made = _bounds(contributions, len(extents))
    same = needs is contributions
    wanted = None if needs is None or same else _bounds(needs, len(extents))
    grid = make_grid(extents, [made[1]] if wanted is None else [made[1], wanted[1]])
    contrib = masks(grid, len(contributions), *made)
    if needs is None:
        empty = np.zeros(0, np.int64)
        return contrib, Cover.of(contrib.members, contrib.cells, empty, empty), grid.volume
    return contrib, contrib if same else masks(grid, len(needs), *wanted), grid.volume


def _stages(contrib: Cover, need: Cover, volume: np.ndarray,
            replicas: np.ndarray | None) -> Stages:
    """Both stages of the rule from the covers (`redistribute`)."""
    if _has_copies(replicas):
        return _with_copies(contrib, need, volume, replicas)
    moved, holders = reduce_stage(contrib, need, volume)
    return Stages(moved, gather_stage(holders, need, volume), holders, contrib, volume)


def _with_copies(contrib: Cover, need: Cover, volume: np.ndarray,
                 replicas: np.ndarray) -> Stages:
    """The rule where members of a replica class hold copies, not partial sums: the members
    are cut into universes, a member's being its rank among its class's members (the n-th
    replica of every class); each universe holds one copy of every class's contribution and
    redistributes it to its own needers by the plain rule, side by side with the others (so
    a tensor replicated above a batch split is reduced within each replica, not across)."""
    rank = _ranks(replicas)
    moved, gathered, universes = Moved.none(contrib.members), Moved.none(contrib.members), []
    for universe in range(int(rank.max()) + 1):
        part = contrib.where(rank[contrib.member] == universe)
        needed = need.where(rank[need.member] == universe)
        reduced, holders = reduce_stage(part, needed, volume)
        moved = moved + reduced
        gathered = gathered + gather_stage(holders, needed, volume)
        universes.append((holders, part))
    return Stages(moved, gathered, universes[0][0], contrib, volume, tuple(universes))


def _has_copies(replicas: np.ndarray | None) -> bool:
    """Whether some members hold copies of another's contribution (a class of two or more)."""
    return replicas is not None and len(np.unique(replicas)) < len(replicas)


def _ranks(replicas: np.ndarray) -> np.ndarray:
    """[members] each member's rank among its replica class's members (its universe)."""
    order = np.argsort(replicas, kind="stable")
    rank = np.empty(len(replicas), dtype=np.int64)
    first_of = np.searchsorted(replicas[order], replicas[order])  # each class's first slot
    rank[order] = np.arange(len(replicas)) - first_of
    return rank
