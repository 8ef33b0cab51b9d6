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

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

Interval = tuple[int, int]
Box = tuple[Interval, ...]  # one interval per axis
Region = tuple[Box, ...]  # disjoint boxes


@dataclass(frozen=True)
class Grid:
    """Cells of a tensor: the atoms of every axis and each cell's volume (elements)."""

    edges: tuple[np.ndarray, ...]  # per axis, sorted unique cut points (0 and extent included)
    volume: np.ndarray  # [cells] elements per cell (flattened, C order)

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(len(e) - 1 for e in self.edges)


def _bounds(regions: Sequence[Region], axes: int) -> tuple[list[int], np.ndarray]:
    """Every box of every region: (its member, [boxes, axes, 2] bounds)."""
    owners = [member for member, region in enumerate(regions) for _ in region]
    boxes = [box for region in regions for box in region]
    return owners, np.array(boxes, dtype=np.int64).reshape(len(boxes), axes, 2)


def make_grid(extents: Sequence[int], regions: Sequence[Sequence[Region]]) -> Grid:
    """The coarsest grid on which every box of every region is a union of cells."""
    bounds = np.concatenate([_bounds(group, len(extents))[1] for group in regions]) \
        if regions else np.zeros((0, len(extents), 2), dtype=np.int64)
    edges = tuple(np.unique(np.concatenate([[0, int(extent)], bounds[:, axis].reshape(-1)]))
                  for axis, extent in enumerate(extents))
    volume = np.ones(1, dtype=np.float64)
    for e in edges:
        volume = np.multiply.outer(volume, np.diff(e).astype(np.float64)).reshape(-1)
    return Grid(edges, volume)


def masks(grid: Grid, regions: Sequence[Region]) -> np.ndarray:
    """[members, cells] True where the member's region covers the cell."""
    owners, bounds = _bounds(regions, len(grid.edges))
    if not owners:
        return np.zeros((len(regions), int(np.prod(grid.shape))), dtype=bool)
    covered = None  # [boxes, cells so far]: the cells of the axes done that each box covers
    for axis, edges in enumerate(grid.edges):
        lo = np.searchsorted(edges, bounds[:, axis, 0])
        hi = np.searchsorted(edges, bounds[:, axis, 1])
        atoms = np.arange(len(edges) - 1)
        inside = (atoms >= lo[:, None]) & (atoms < hi[:, None])
        covered = inside if covered is None else \
            (covered[:, :, None] & inside[:, None, :]).reshape(len(owners), -1)
    if owners == list(range(len(regions))):  # one box a member
        return covered
    out = np.zeros((len(regions), covered.shape[1]), dtype=bool)
    np.logical_or.at(out, np.array(owners), covered)
    return out


def _without_diagonal(matrix: np.ndarray) -> np.ndarray:
    """What a member keeps for itself is not moved."""
    np.fill_diagonal(matrix, 0.0)
    return matrix


def member_products(left: np.ndarray, right: np.ndarray) -> np.ndarray:
    """[members, members] left @ right.T for [members, cells] arrays (`right` boolean): the
    elements each member sends each other member. Where few members touch each cell (most
    relayouts: nnz products far below members^2 x cells) the products are summed cell by
    cell over the nonzero pairs only; otherwise as one dense product."""
    members, cells = left.shape
    cell_left, member_left = np.nonzero(left.T)  # entries by cell, then member
    cell_right, member_right = np.nonzero(right.T)
    per_cell = np.bincount(cell_right, minlength=cells)
    repeats = per_cell[cell_left]
    pairs = int(repeats.sum())
    if pairs * 8 > members * members * max(cells, 1):
        return left.astype(np.float64) @ right.T.astype(np.float64)
    first = np.cumsum(per_cell) - per_cell  # each cell's first entry in the right ones
    within = np.arange(pairs) - np.repeat(np.cumsum(repeats) - repeats, repeats)
    receiver = member_right[np.repeat(first[cell_left], repeats) + within]
    sender = np.repeat(member_left, repeats)
    weights = np.repeat(left.T[cell_left, member_left].astype(np.float64), repeats)
    return np.bincount(sender * members + receiver, weights,
                       minlength=members * members).reshape(members, members)


def reduce_stage(contrib: np.ndarray, need: np.ndarray, volume: np.ndarray) -> tuple[
        np.ndarray, np.ndarray]:
    """(elements [src, dst] of the reduce-scatter, holder fractions [members, cells])."""
    both = contrib & need
    owners = np.where(both.any(axis=0), both, contrib)
    count = owners.sum(axis=0)
    share = np.divide(volume, count, out=np.zeros_like(volume), where=count > 0)
    moved = _without_diagonal(member_products(contrib * share, owners))
    return moved, owners * np.divide(1.0, count, out=np.zeros_like(volume), where=count > 0)


def gather_stage(holders: np.ndarray, need: np.ndarray, volume: np.ndarray) -> np.ndarray:
    """Elements [src, dst] that needers receive from the holders of what they lack."""
    return _without_diagonal(member_products(holders * volume, need))


@dataclass(frozen=True)
class Stages:
    """One redistribution: elements moved [src, dst] by the reduce and the gather stage,
    the fraction of each cell every member holds after the reduce, and the grid."""

    reduce: np.ndarray
    gather: np.ndarray
    holders: np.ndarray  # [members, cells]
    contrib: np.ndarray  # [members, cells]
    volume: np.ndarray  # [cells]


def redistribute(extents: Sequence[int], contributions: Sequence[Region],
                 needs: Sequence[Region] | None) -> Stages:
    """Both stages for one tensor. `needs` None: nobody needs it in a given layout (the
    loss takes the reduced values wherever the reduction leaves them)."""
    grid = make_grid(extents, [contributions, needs or ()])
    contrib = masks(grid, contributions)
    need = masks(grid, needs) if needs is not None else np.zeros_like(contrib)
    moved, holders = reduce_stage(contrib, need, grid.volume)
    return Stages(moved, gather_stage(holders, need, grid.volume), holders, contrib, grid.volume)
