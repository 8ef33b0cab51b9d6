"""What a member reads of each input of a graph node, from the node's description.

A member's box gives an interval of every loop of a node (its `Description`'s loops and
the batch N); `region` evaluates a tensor's index expressions (`workload.tdl`) on the box:
a loop's own interval, a window's input rows (the halo), a whole axis, a shifted range (a
concatenation's input, a slice), a grouped convolution's channels (its groups' ranges), or
the boxes of a flat range over several axes (a reshape's run of axes, an fc layer's
flattened map). The result is a region: the boxes of the tensor the member touches.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence

import numpy as np

from hypar_sim.partition.member_boxes import MemberBoxes
from hypar_sim.partition.redistribute import Region
from hypar_sim.workload.dims import Dim
from hypar_sim.workload.tdl import (
    Access,
    Description,
    Expr,
    Flat,
    Grouped,
    Ix,
    Shift,
    Whole,
    Window,
)

Interval = tuple[int, int]
Box = dict[Dim, Interval]  # one member's interval of every loop dimension


def region(access: Access, box: Box) -> Region:
    """The boxes of a tensor (batch first) a member whose loops are `box` touches."""
    if any(box[d][1] <= box[d][0] for d in access.needs):
        return ()
    parts = [_expr(expr, box) for expr in access.axes]
    return tuple((box[Dim.N], *itertools.chain.from_iterable(combo))
                 for combo in itertools.product(*parts))


def member_regions(access: Access, boxes: Mapping[Dim, np.ndarray]) -> tuple[Region, ...]:
    """`region` of every member at once, from `boxes` ([members, 2] intervals of every loop,
    `NodeLayout.boxes`): `member_boxes`' where it applies, else member by member."""
    arrays = member_boxes(access, boxes)
    if arrays is not None:
        return arrays.regions
    dims = list(boxes)
    rows = zip(*([tuple(pair) for pair in boxes[d].tolist()] for d in dims), strict=True)
    return tuple(region(access, dict(zip(dims, row, strict=True))) for row in rows)


def member_boxes(access: Access, boxes: Mapping[Dim, np.ndarray]) -> MemberBoxes | None:
    """`region` of every member as arrays over the members, where every axis is a loop, a
    window, a whole axis or a shift (one interval a member, one box a region); else None."""
    if not all(isinstance(expr, Ix | Window | Whole | Shift) for expr in access.axes):
        return None
    members = len(boxes[Dim.N])
    empty = np.zeros(members, dtype=bool)
    for dim in access.needs:
        empty |= boxes[dim][:, 1] <= boxes[dim][:, 0]
    axes = [boxes[Dim.N]]
    for expr in access.axes:
        if isinstance(expr, Shift) and expr.clip:
            lo, hi = boxes[expr.dim][:, 0], boxes[expr.dim][:, 1]
            lo = np.maximum(lo, expr.offset) - expr.offset
            hi = np.minimum(hi, expr.offset + expr.size) - expr.offset
            empty |= hi <= lo  # no part of the tensor: no box
            axes.append(np.stack([lo, hi], axis=1))
        else:
            axes.append(_intervals(expr, boxes, members))
    return MemberBoxes.of(np.stack(axes, axis=1), empty)  # [members, axes, 2]


def _intervals(expr: Ix | Window | Whole | Shift, boxes: Mapping[Dim, np.ndarray],
               members: int) -> np.ndarray:
    """[members, 2] every member's interval of one axis (`_expr`'s, a shift unclipped)."""
    if isinstance(expr, Ix):
        return boxes[expr.dim]
    if isinstance(expr, Whole):
        return np.tile(np.array([0, expr.size], dtype=np.int64), (members, 1))
    if isinstance(expr, Shift):
        return boxes[expr.dim] - expr.offset
    inner = _intervals(expr.dim, boxes, members) if isinstance(expr.dim, Window) else \
        boxes[expr.dim]
    lo, hi = inner[:, 0], inner[:, 1]
    window = np.stack([np.maximum(0, lo * expr.stride - expr.before),
                       np.minimum(expr.size, (hi - 1) * expr.stride - expr.before
                                  + expr.span)], axis=1)
    return np.where((hi <= lo)[:, None], 0, window)


def volume(region: Region) -> int:
    """Elements of a region (its boxes are disjoint)."""
    return sum(math.prod(max(0, hi - lo) for lo, hi in box) for box in region)


def interval(expr: Ix | Window, box: Box) -> Interval:
    """The one interval of an axis indexed by a loop or a window (of a window)."""
    return _expr(expr, box)[0][0]


def _expr(expr: Expr, box: Box) -> list[tuple[Interval, ...]]:
    """The intervals of the axes of one expression: a list of alternatives (several where
    the part is not one box), each a tuple with one interval per axis."""
    if isinstance(expr, Ix):
        return [(box[expr.dim],)]
    if isinstance(expr, Window):
        lo, hi = interval(expr.dim, box) if isinstance(expr.dim, Window) else box[expr.dim]
        if hi <= lo:
            return [((0, 0),)]
        return [((max(0, lo * expr.stride - expr.before),
                  min(expr.size, (hi - 1) * expr.stride - expr.before + expr.span)),)]
    if isinstance(expr, Whole):
        return [((0, expr.size),)]
    if isinstance(expr, Shift):
        lo, hi = box[expr.dim]
        if not expr.clip:
            return [((lo - expr.offset, hi - expr.offset),)]
        lo, hi = max(lo, expr.offset) - expr.offset, min(hi, expr.offset + expr.size) - expr.offset
        return [] if hi <= lo else [((lo, hi),)]
    if isinstance(expr, Grouped):
        return [(interval,) for interval in group_channels(box, expr)]
    return _flat(expr, box)


def group_channels(box: Box, expr: Grouped) -> list[Interval]:
    """Channel ranges of the groups a member's box covers, its range of each (whole groups:
    one range)."""
    first, last = box[expr.group]
    lo, hi = box[expr.dim]
    if last <= first or hi <= lo:
        return []
    if (lo, hi) == (0, expr.per_group):
        return [(first * expr.per_group, last * expr.per_group)]
    return [(g * expr.per_group + lo, g * expr.per_group + hi) for g in range(first, last)]


def _flat(expr: Flat, box: Box) -> list[tuple[Interval, ...]]:
    """The flat index ranges of the loops' box over their C-order extents, cut into boxes
    of the tensor's run of axes."""
    pieces: list[tuple[Interval, ...]] = []
    for start in _runs([box[d] for d in expr.dims], list(expr.extents)):
        pieces += flat_boxes(*start, expr.shape) if expr.shape else [()]
    return pieces


def _runs(ranges: list[Interval], shape: list[int]) -> list[Interval]:
    """The flat index ranges of a box over a C-order `shape` (contiguous runs merged)."""
    if not shape:
        return [(0, 1)]
    inner = math.prod(shape[1:])
    lo, hi = ranges[0]
    if all(r == (0, s) for r, s in zip(ranges[1:], shape[1:], strict=True)):
        return [(lo * inner, hi * inner)] if hi > lo else []
    rest = _runs(ranges[1:], shape[1:])
    return [(i * inner + a, i * inner + b) for i in range(lo, hi) for a, b in rest]


def weight_shape(desc: Description) -> tuple[int, int]:
    """(rows, columns) of a node's weight matrix: (K, C), or an embedding table's (vocab, K)."""
    assert desc.weights is not None
    return desc.weights.rows, desc.weights.columns


def flat_boxes(start: int, stop: int, shape: Sequence[int]) -> list[tuple[tuple[int, int], ...]]:
    """The flat index range [start, stop) of a C-order array of `shape` as disjoint boxes."""
    if start >= stop:
        return []
    if len(shape) == 1:
        return [((start, stop),)]
    inner = math.prod(shape[1:])
    first, last = start // inner, (stop - 1) // inner
    full = [tuple((0, s) for s in shape[1:])]
    if first == last:
        return [((first, first + 1), *box)
                for box in flat_boxes(start - first * inner, stop - first * inner, shape[1:])]
    boxes: list[tuple[tuple[int, int], ...]] = []
    lo, hi = first, last + 1
    if start % inner:
        boxes += [((first, first + 1), *b) for b in flat_boxes(start % inner, inner, shape[1:])]
        lo = first + 1
    if stop % inner:
        hi = last
    if hi > lo:
        boxes += [((lo, hi), *b) for b in full]
    if stop % inner:
        boxes += [((last, last + 1), *b) for b in flat_boxes(0, stop % inner, shape[1:])]
    return boxes
