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


def make_grid(extents: Sequence[int], regions: Sequence[Sequence[Region]]) -> Grid:
    """The coarsest grid on which every box of every region is a union of cells."""
    cuts = [{0, int(extent)} for extent in extents]
    for group in regions:
        for region in group:
            for box in region:
                for axis, (lo, hi) in enumerate(box):
                    cuts[axis].update((lo, hi))
    edges = tuple(np.array(sorted(c), dtype=np.int64) for c in cuts)
    volume = np.ones(1, dtype=np.float64)
    for e in edges:
        volume = np.multiply.outer(volume, np.diff(e).astype(np.float64)).reshape(-1)
    return Grid(edges, volume)


def masks(grid: Grid, regions: Sequence[Region]) -> np.ndarray:
    """[members, cells] True where the member's region covers the cell."""
    out = np.zeros((len(regions), *grid.shape), dtype=bool)
    for member, region in enumerate(regions):
        for box in region:
            index = tuple(slice(int(np.searchsorted(e, lo)), int(np.searchsorted(e, hi)))
                          for e, (lo, hi) in zip(grid.edges, box, strict=True))
            out[(member, *index)] = True
    return out.reshape(len(regions), -1)


def _without_diagonal(matrix: np.ndarray) -> np.ndarray:
    """What a member keeps for itself is not moved."""
    np.fill_diagonal(matrix, 0.0)
    return matrix


def reduce_stage(contrib: np.ndarray, need: np.ndarray, volume: np.ndarray) -> tuple[
        np.ndarray, np.ndarray]:
    """(elements [src, dst] of the reduce-scatter, holder fractions [members, cells])."""
    both = contrib & need
    owners = np.where(both.any(axis=0), both, contrib)
    count = owners.sum(axis=0)
    share = np.divide(volume, count, out=np.zeros_like(volume), where=count > 0)
    moved = _without_diagonal((contrib * share) @ owners.T.astype(np.float64))
    return moved, owners * np.divide(1.0, count, out=np.zeros_like(volume), where=count > 0)


def gather_stage(holders: np.ndarray, need: np.ndarray, volume: np.ndarray) -> np.ndarray:
    """Elements [src, dst] that needers receive from the holders of what they lack."""
    return _without_diagonal((holders * volume) @ need.T.astype(np.float64))


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
