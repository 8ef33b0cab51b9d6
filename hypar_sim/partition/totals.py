"""Closed forms of the `layout` model's byte totals, for the planner's searches.

The rule of `redistribute` moves, for one tensor T with contributions B_a
and needs W_b (cells with no contributor cost nothing),

    reduce = sum_a |B_a| - |union_a B_a|
    gather = sum_b |W_b & union B| - |union_a (B_a & W_a)|.

At a layer boundary the forward pass has B = the producer's output boxes
(they cover T; overlapping only where the producer splits its reduction
dimension, in identical boxes) and W = the consumer's reads (with halos);
the backward pass swaps them (B = the consumer's error contributions, the
same boxes as its reads, whose union R does not depend on the split). So a
boundary costs, in elements,

    r (sum|B_a| - |T|) + sum|B_a & R| + 2 sum|W_a| - |R| - 2 U,
    U = |union_a (B_a & W_a)|

with r the producer's pre/post pooling ratio; the forward pass alone (inference)
costs r (sum|B_a| - |T|) + sum|W_a| - U. Only U depends on both
columns. Members with the same producer box form a group G, and the group
members' reads vary along each axis with the coordinates of different
levels, so union_{a in G} W_a is a product over axes of per-axis unions:
U = sum_G prod_axis |B_G & union_{a in G} W_a| along that axis. Each
per-axis union is a sum over G's members with distinct reads, once halo
reads are clipped to disjoint pieces, so the factors are tables over
(producer key, consumer key, group) for all columns at once, and U for
every pair of columns is one batched matrix product over the groups. A
layer's own cost (weight gradient all-reduce; the loss for the last layer)
is a closed form of one column. Tests check every total against the
cell-by-cell rule.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from functools import lru_cache

import numpy as np

from hypar_sim.partition.hierarchy import Hierarchy
from hypar_sim.partition.kinds import Dim
from hypar_sim.partition.operators import OPERATORS
from hypar_sim.partition.shares import (
    Column,
    Columns,
    conv_spans,
    input_span,
    input_spans,
)
from hypar_sim.workload.layers import Layer, LayerKind


def _lengths(intervals: np.ndarray) -> np.ndarray:
    return (intervals[..., 1] - intervals[..., 0]).astype(np.float64)


def _overlap(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Lengths of the intersections of intervals a[..., 2] and b[..., 2] (broadcast)."""
    return np.maximum(0, np.minimum(a[..., 1], b[..., 1]) - np.maximum(a[..., 0], b[..., 0])) \
        .astype(np.float64)


def own_costs(layer: Layer, batch: int, columns: Sequence[Column], hierarchy: Hierarchy,
              word_bytes: int, last: bool, forward_only: bool = False) -> np.ndarray:
    """Bytes of each column's own steps: the gradient all-reduce, and the loss if last
    (its partial outputs reduced, before pooling, and its error gathered); with
    `forward_only` (inference), the last layer's partial outputs alone."""
    if not columns:
        return np.zeros(0)
    parts = Columns.of(tuple(columns), hierarchy.levels).boxes(layer, batch, hierarchy)
    out = layer.output
    held = (_lengths(parts[Dim.K]) * _lengths(parts[Dim.C])).sum(axis=1)
    costs = 2 * (held - out.channels * layer.input.channels) * layer.kernel ** 2
    if forward_only:
        costs = np.zeros(len(columns))
    if last:
        computed = np.prod([_lengths(parts[d]) for d in (Dim.N, Dim.K, Dim.P, Dim.Q)],
                           axis=0).sum(axis=1)
        pooled = layer.conv_output.size / out.size
        costs = costs + (pooled if forward_only else pooled + 1) * (computed - batch * out.size)
    return costs * word_bytes


class _Reads:
    """Every member's reads of the boundary tensor, for every consumer column, per axis:
    conv consumers (N, C, rows, cols) intervals; fc consumers (N, flat) intervals."""

    def __init__(self, consumer: Layer, batch: int, columns: Columns,
                 hierarchy: Hierarchy) -> None:
        parts = columns.boxes(consumer, batch, hierarchy, OPERATORS[consumer.kind].input)
        self.flat = consumer.kind is LayerKind.FC
        axes = [parts[Dim.N], parts[Dim.C]]
        if not self.flat:
            for dim, axis in ((Dim.P, "rows"), (Dim.Q, "cols")):
                axes.append(input_spans(consumer, conv_spans(consumer, parts[dim], axis), axis))
        self.axes = axes  # each [columns, members, 2]
        #: Whether members' reads along an axis may overlap (a conv's halo rows and columns;
        #: overlapping pooling windows): along the others, different parts are disjoint.
        self.halo = [False, False] + [True] * (len(axes) - 2)

    def volumes(self) -> np.ndarray:
        """sum_a |W_a| per column."""
        return np.prod([_lengths(a) for a in self.axes], axis=0).sum(axis=1)


#: The producer's output dimension and the consumer's dimension along each axis of the
#: boundary tensor (conv consumer; an fc consumer has N and the flattened C).
_CONV_AXES = ((Dim.N, Dim.N), (Dim.K, Dim.C), (Dim.P, Dim.P), (Dim.Q, Dim.Q))


def boundary_costs(producer: Layer, consumer: Layer, batch: int,
                   producer_columns: Sequence[Column], columns: Sequence[Column],
                   hierarchy: Hierarchy, word_bytes: int,
                   forward_only: bool = False) -> np.ndarray:
    """[producer column, consumer column] bytes across the boundary, both passes (with
    `forward_only`, the forward pass's: r (sum|B_a| - |T|) + sum|W_a| - U)."""
    if not producer_columns or not columns:
        return np.zeros((len(producer_columns), len(columns)))
    out = producer.output
    shape = (batch, out.channels, out.height, out.width)
    total = float(np.prod(shape))
    pooled = producer.conv_output.size / out.size
    made = Columns.of(tuple(producer_columns), hierarchy.levels)
    read = Columns.of(tuple(columns), hierarchy.levels)
    reads = _Reads(consumer, batch, read, hierarchy)
    if reads.flat:
        read_box = np.array([[0, batch], [0, out.channels], [0, out.height], [0, out.width]])
    else:
        rows = input_span(consumer, 0, consumer.conv_output.height, "rows")
        cols = input_span(consumer, 0, consumer.conv_output.width, "cols")
        read_box = np.array([[0, batch], [0, out.channels], list(rows), list(cols)])
    read_total = float(np.prod(read_box[:, 1] - read_box[:, 0]))
    dims = OPERATORS[producer.kind]
    parts = made.boxes(producer, batch, hierarchy, dims.output)
    held = np.stack([parts[d] for d in (Dim.N, Dim.K, Dim.P, Dim.Q)], axis=2)
    # held: [columns, members, 4, 2]
    computed = np.prod(_lengths(held), axis=2).sum(axis=1)
    in_reads = np.prod(_overlap(held, read_box[None, None]), axis=2).sum(axis=1)
    union = _union_matrix(held, reads, made, read, hierarchy, shape[1:],
                          dims.reductions(dims.output))
    if forward_only:
        producer_side, consumer_side = pooled * (computed - total), reads.volumes()
    else:
        producer_side = pooled * (computed - total) + in_reads
        consumer_side = 2 * reads.volumes() - read_total
        union *= 2
    union *= -1  # in place (a fresh [p, q] matrix); adding the sides turns -0.0 into 0.0
    union += producer_side[:, None]
    union += consumer_side[None, :]
    union *= word_bytes
    return union


def _union_matrix(held: np.ndarray, reads: _Reads, made: Columns, read: Columns,
                  hierarchy: Hierarchy, space: tuple[int, int, int],
                  reductions: frozenset[Dim]) -> np.ndarray:
    """U for every pair of columns. Producer members with the same coordinates outside the
    producer's partial levels (kinds that split one of the `reductions` of its output, see
    `operators`) hold the same box: a group G, and U = sum_G prod_axis f(G, axis), f the
    measure of G's box inside the union of its members' reads along the axis
    (`_axis_factors`, a slot per member number: a group sits in its first member's slot),
    assembled by one batched matrix product (`_contract`)."""
    axes = [((Dim.N,), Dim.N), ((Dim.K, Dim.P, Dim.Q), Dim.C)] if reads.flat else \
        [((produced,), needed) for produced, needed in _CONV_AXES]
    reduced = tuple(sorted(reductions))
    grid = made.kept(("grid", hierarchy, reduced),
                     lambda: _Grid(hierarchy, made.split_bits(reduced)))
    per_row = np.ones((1, hierarchy.members))  # factors that vary with the producer alone
    parts = []
    for x, (produced, needed) in enumerate(axes):
        factors, p_index, q_index = _axis_factors(
            grid, held, reads.axes[x], made, read, produced, needed,
            space if reads.flat and x == 1 and space[1:] != (1, 1) else None, reads.halo[x])
        if factors.shape[1] == 1:
            per_row = per_row * factors[p_index, 0]
        else:
            parts.append((factors, p_index, q_index))
    return _contract(parts, np.broadcast_to(per_row, (len(made), hierarchy.members)),
                     len(read))


def _contract(parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]], per_row: np.ndarray,
              columns: int) -> np.ndarray:
    """sum over slots g of per_row[p, g] * prod_axis factors[key(p), key(q), g] for every
    producer column p and consumer column q (`parts`: factors [producer keys, consumer keys,
    slots] and each column's keys), as one batched matrix product: the axis with the most
    consumer keys on one side, the others multiplied on the distinct key tuples the
    consumer columns use. The entries are whole numbers below 2**53: any order of sums is
    exact."""
    if not parts:
        return np.repeat(per_row.sum(axis=1, keepdims=True), columns, axis=1)
    parts = sorted(parts, key=lambda part: part[0].shape[1])
    right, right_rows, right_index = parts.pop()
    right = (right[right_rows] * per_row[:, None, :]).transpose(0, 2, 1)  # [p, slots, keys]
    if not parts:
        return right.sum(axis=1)[:, right_index]
    codes = np.zeros(columns, dtype=np.int64)
    for factors, _, index in parts:
        codes = codes * factors.shape[1] + index
    _, first, tuple_of = np.unique(codes, return_index=True, return_inverse=True)
    tuple_of = tuple_of.reshape(-1)
    keys = [index[first] for _, _, index in parts]
    rows = len(right)
    result = np.empty((rows, columns))
    step = max(1, _CHUNK_ENTRIES // (len(first) * right.shape[1]))
    for start in range(0, rows, step):  # in blocks of rows that stay in the CPU's cache
        block = slice(start, start + step)
        left = parts[0][0][parts[0][1][block]][:, keys[0]]  # [p, tuples, slots]
        for (factors, p_index, _), key in zip(parts[1:], keys[1:], strict=True):
            left *= factors[p_index[block]][:, key]
        result[block] = np.matmul(left, right[block])[:, tuple_of, right_index]
    return result


#: Entries of the left factor computed at once (256 KiB of float64).
_CHUNK_ENTRIES = 32768


def _numbered(codes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(index of the first of each distinct code, each code's number in sorted order)."""
    _, first, inverse = np.unique(codes, return_index=True, return_inverse=True)
    return first, inverse.reshape(-1)


class _Grid:
    """The members' coordinates, and the group classes: producer columns with the same
    partial levels (`partial`, bit masks); in class c, member a's group is numbered by its
    first member, a with its coordinates at c's levels set to 0."""

    def __init__(self, hierarchy: Hierarchy, partial: np.ndarray) -> None:
        self.members = np.arange(hierarchy.members)
        strides = np.array(hierarchy.strides, dtype=np.int64)
        coords = (self.members[:, None] // strides) % np.array(hierarchy.sizes, dtype=np.int64)
        self.place = coords * strides  # [M, L]: what each coordinate adds to the number
        self.bits = 1 << np.arange(hierarchy.levels, dtype=np.int64)
        self.off_zero = (coords > 0) @ self.bits  # [M] levels where a coordinate is not 0
        self.classes, class_of = np.unique(partial, return_inverse=True)
        self.class_of = class_of.reshape(-1)
        self.group = self.zeroed(self.classes)  # [classes, M]

    def zeroed(self, levels: np.ndarray) -> np.ndarray:
        """[..., M] every member with its coordinates at the levels of `levels` (bit masks,
        any shape) set to 0."""
        on = (levels[..., None] & self.bits) > 0  # [..., L]
        return self.members - (on[..., None, :] * self.place).sum(axis=-1)


def _axis_factors(grid: _Grid, held: np.ndarray, reads: np.ndarray, made: Columns,
                  read: Columns, produced: Sequence[Dim], needed: Dim,
                  space: tuple[int, int, int] | None, halo: bool
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(factors [producer keys, consumer keys, slot], each producer column's key, each
    consumer column's key) along one axis: f(G) = |B_G & union_{a in G} W_a| in the slot
    of G's first member (0 in the other slots), for B the producer's boxes `held`
    [columns, M, 4, 2] (along the axis: N, K, P or Q; for the flattened axis of an fc
    consumer, (K, P, Q) boxes in `space`, or K alone without a `space`: a 1 x 1 map) and W
    the consumer's `reads` [columns, M, 2].

    G's members differ only at its class's partial levels c. W_a varies along the axis
    with the coordinates at the levels l where the consumer splits the axis's dimension:
    the distinct W_a of G are those of its members whose coordinates at c - l are 0 (its
    representatives), disjoint along a `halo`-free axis; along one with halos each is
    clipped to what the representatives before it (by start) do not cover (`_clipped`).
    So f(G) is the sum over G's representatives of |B_G & W_a|."""
    def producer_keys() -> tuple[np.ndarray, np.ndarray]:
        code = made.numbered(tuple(produced))
        return _numbered(grid.class_of * (int(code.max()) + 1) + code)

    p_first, p_index = made.kept(("keys", grid, tuple(produced)), producer_keys)
    split_of = read.split_bits((needed,))
    q_first, q_index = read.kept(("numbered bits", needed), lambda: _numbered(split_of))
    split = split_of[q_first][None, :]  # [1, consumer keys] against every class
    p_class = grid.class_of[p_first]
    classes = grid.classes[:, None]
    needs = reads[q_first][None]  # [1, consumer keys, M, 2]
    if halo:  # clipped within each distinct (levels a group unites, consumer key)
        keys = len(q_first)
        unite = (classes & split) * keys + np.arange(keys)  # [classes, consumer keys]
        pairs, pair_of = np.unique(unite, return_inverse=True)
        clipped = _clipped(needs[0][pairs % keys], grid.zeroed(pairs // keys))
        needs = clipped[pair_of.reshape(unite.shape)[p_class]]  # [p keys, q keys, M, 2]
    if space is None:
        inside = _overlap(held[p_first][:, None, :, _AXIS[produced[0]]], needs)
    else:
        boxes = held[p_first][:, None, :, 1:]  # [p keys, 1, M, 3, 2]
        inside = _flat_count(boxes, needs[..., 1], space) - _flat_count(boxes, needs[..., 0],
                                                                          space)
    single = (grid.off_zero & (classes & ~split)[..., None]) == 0  # [classes, q keys, M]
    inside = inside * single[p_class]  # [p keys, q keys, M]
    members = len(grid.members)
    slot = grid.group[p_class][:, None, :] + members * np.arange(
        inside.shape[0] * inside.shape[1]).reshape(inside.shape[:2])[..., None]
    factors = np.bincount(slot.reshape(-1), inside.reshape(-1), inside.size)
    return factors.reshape(inside.shape), p_index, q_index


#: Where each producer output dimension sits along `held`'s third axis.
_AXIS = {produced: x for x, (produced, _) in enumerate(_CONV_AXES)}


def _clipped(intervals: np.ndarray, groups: np.ndarray) -> np.ndarray:
    """[..., M, 2] each interval of `intervals` [..., M, 2] less what the intervals of its
    group (`groups` [..., M], broadcast) that start before it cover: disjoint intervals
    with the same union in each group (a sweep by start)."""
    groups = np.broadcast_to(groups, np.broadcast_shapes(groups.shape, intervals.shape[:-1]))
    shift = groups * (int(intervals.max(initial=0)) + 1)
    start, stop = intervals[..., 0] + shift, intervals[..., 1] + shift
    order = np.argsort(start, axis=-1, kind="stable")
    start = np.take_along_axis(start, order, axis=-1)
    stop = np.take_along_axis(stop, order, axis=-1)
    covered = np.maximum.accumulate(stop, axis=-1)
    before = np.concatenate([np.full(start.shape[:-1] + (1,), -1), covered[..., :-1]], axis=-1)
    back = np.argsort(order, axis=-1)
    pieces = [np.take_along_axis(np.maximum(end, before), back, axis=-1) - shift
              for end in (start, stop)]
    return np.stack(pieces, axis=-1)


def _flat_count(boxes: np.ndarray, flat: np.ndarray, space: tuple[int, int, int]) -> np.ndarray:
    """Elements of each (channel, row, column) box of `boxes` [..., 3, 2] whose flat index
    in a C-order array of `space` is below `flat` [...] (broadcast)."""
    _, height, width = space
    channel, rest = np.divmod(flat, height * width)
    row, col = np.divmod(rest, width)
    (c0, c1), (r0, r1), (s0, s1) = (np.moveaxis(boxes[..., d, :], -1, 0) for d in range(3))
    full_rows = np.clip(row - r0, 0, r1 - r0) * (s1 - s0) \
        + ((r0 <= row) & (row < r1)) * np.clip(col - s0, 0, s1 - s0)
    return np.clip(channel - c0, 0, c1 - c0) * (r1 - r0) * (s1 - s0) \
        + ((c0 <= channel) & (channel < c1)) * full_rows


def _boundary_geometry(producer: Layer, consumer: Layer) -> tuple[Layer, Layer]:
    """What a boundary's bytes depend on: the producer's output side and the consumer's
    input side (`boundary_costs` reads no other channel count), so boundaries that differ
    only in the producer's input channels or the consumer's output channels (VGG's repeated
    convolutions) share a cache entry."""
    no_input = producer.input._replace(channels=0)
    no_output = {"conv_output": consumer.conv_output._replace(channels=0),
                 "output": consumer.output._replace(channels=0)}
    return (dataclasses.replace(producer, name="", input=no_input),
            dataclasses.replace(consumer, name="", **no_output))


def cached_boundary_costs(producer: Layer, consumer: Layer, batch: int,
                          producer_columns: tuple[Column, ...], columns: tuple[Column, ...],
                          hierarchy: Hierarchy, word_bytes: int,
                          forward_only: bool = False) -> np.ndarray:
    """`boundary_costs`, cached by geometry (VGG repeats its layers' shapes); read-only."""
    return _cached(*_boundary_geometry(producer, consumer), batch, producer_columns, columns,
                   hierarchy, word_bytes, forward_only)


@lru_cache(maxsize=256)
def _cached(producer: Layer, consumer: Layer, batch: int, producer_columns: tuple[Column, ...],
            columns: tuple[Column, ...], hierarchy: Hierarchy, word_bytes: int,
            forward_only: bool) -> np.ndarray:
    costs = boundary_costs(producer, consumer, batch, producer_columns, columns, hierarchy,
                           word_bytes, forward_only)
    costs.flags.writeable = False
    return costs

