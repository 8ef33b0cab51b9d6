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
U = sum_G prod_axis |B_G & union_{a in G} W_a| along that axis. That is
computed for every consumer column at once (numpy), one producer column at
a time. A layer's own cost (weight gradient all-reduce; the loss for the
last layer) is a closed form of one column. Tests check every total against
the cell-by-cell rule.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from hypar_sim.partition.hierarchy import Hierarchy
from hypar_sim.partition.kinds import Dim
from hypar_sim.partition.layout import flat_boxes
from hypar_sim.partition.operators import OPERATORS
from hypar_sim.partition.shares import (
    DIMS,
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
    parts = Columns(columns, hierarchy.levels).boxes(layer, batch, hierarchy)
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
    made, read = Columns(producer_columns, hierarchy.levels), Columns(columns, hierarchy.levels)
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
        result = (pooled * (computed - total))[:, None] + reads.volumes()[None, :] - union
    else:
        result = (pooled * (computed - total) + in_reads)[:, None] \
            + (2 * reads.volumes() - read_total)[None, :] - 2 * union
    return result * word_bytes


def _first_of_each(codes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(index of the first entry of each distinct code, each entry's distinct-code number)."""
    _, first, inverse = np.unique(codes, return_index=True, return_inverse=True)
    return first, inverse.reshape(-1)


def _union_matrix(held: np.ndarray, reads: _Reads, made: Columns, read: Columns,
                  hierarchy: Hierarchy, space: tuple[int, int, int],
                  reductions: frozenset[Dim]) -> np.ndarray:
    """U for every pair of columns. Producer members with the same coordinates outside the
    producer's partial levels (kinds that split one of the `reductions` of its output, see
    `operators`) hold the same box: a group. Along each axis, the group's factor depends on
    the producer column only through (its levels splitting that axis's dimension, its
    partial levels), and on the consumer column only through its levels splitting the
    consumer's dimension there: each distinct factor is computed once, and U is assembled
    by one batched matrix product per group class (`_contract`)."""
    axes = [({Dim.N}, Dim.N), ({Dim.K, Dim.P, Dim.Q}, Dim.C)] if reads.flat else \
        [({produced}, needed) for produced, needed in _CONV_AXES]
    members = np.arange(hierarchy.members)
    partial = made.code(reductions)
    consumer_keys = [_first_of_each(read.code({needed})) for _, needed in axes]
    producer_codes = [made.code(produced) for produced, _ in axes]
    reduction_dims = [DIMS.index(d) for d in reductions]
    result = np.zeros((len(made), len(read)))
    for code in np.unique(partial):
        rows = np.nonzero(partial == code)[0]
        fixed = members.copy()
        for h in range(hierarchy.levels):
            if made.dims[rows[0], h] in reduction_dims:
                fixed -= ((members // hierarchy.strides[h]) % hierarchy.sizes[h]) \
                    * hierarchy.strides[h]
        firsts, group_of = np.unique(fixed, return_inverse=True)
        order = np.argsort(group_of, kind="stable")
        starts = np.searchsorted(group_of[order], np.arange(len(firsts)))
        first_member = order[starts]
        parts = []  # per axis varying with a column: ([rows or 1, consumer keys, groups], keys)
        common = np.ones(len(firsts))  # factors that vary with neither column
        for axis in range(len(axes)):
            q_rep, q_index = consumer_keys[axis]
            intervals = reads.axes[axis][q_rep]
            p_first, p_index = _first_of_each(producer_codes[axis][rows])
            owns = held[rows[p_first]][:, first_member]  # [keys, G, 4, 2]
            if reads.flat and axis == 1:
                factors = _axis_factors(intervals, owns[:, :, 1:], order, starts, space)
            else:
                factors = _axis_factors(intervals, owns[:, :, axis], order, starts, None)
            if factors.shape[:2] == (1, 1):
                common *= factors[0, 0]
            else:
                parts.append((factors[p_index] if len(p_first) > 1 else factors, q_index))
        result[rows] = _contract(parts, common, len(read))
    return result


def _contract(parts: list[tuple[np.ndarray, np.ndarray]], common: np.ndarray,
              columns: int) -> np.ndarray:
    """sum over groups g of common[g] * prod_axis part[p, key(q), g], for every producer row p
    and consumer column q, as one batched matrix product: the axis with the most consumer
    keys on one side, the others multiplied on the distinct key tuples the columns use. The
    entries are whole numbers below 2**53, so any order of sums is exact."""
    if not parts:
        return np.full((1, columns), common.sum())
    parts = sorted(parts, key=lambda part: part[0].shape[1])
    right, right_index = parts.pop()
    left = common[None, None, :]
    if parts:
        codes = np.zeros(columns, dtype=np.int64)
        for part, index in parts:
            codes = codes * part.shape[1] + index
        _, first, tuple_of = np.unique(codes, return_index=True, return_inverse=True)
        for part, index in parts:
            left = left * part[:, index[first]]
        tuple_of = tuple_of.reshape(-1)
    else:
        tuple_of = np.zeros(columns, dtype=np.int64)
    return np.matmul(left, right.transpose(0, 2, 1))[:, tuple_of, right_index]


def _axis_factors(intervals: np.ndarray, owns: np.ndarray, order: np.ndarray,
                  starts: np.ndarray, space: tuple[int, int, int] | None) -> np.ndarray:
    """[producer keys, consumer keys, groups]: the measure of each group's own part (`owns`
    [keys, groups, 2], or [keys, groups, 3, 2] boxes of the flattened axis when `space` is
    given) inside the union of the group members' intervals [consumer keys, members, 2]."""
    if space is None and len(starts) == intervals.shape[1]:  # every group one member
        return _overlap(owns[:, None], intervals[None, :][:, :, order])
    ends = [intervals.reshape(-1)] if space is not None else [intervals.reshape(-1),
                                                              owns.reshape(-1)]
    edges = np.unique(np.concatenate(ends))
    lo, hi = edges[:-1], edges[1:]
    covered = (intervals[..., 0:1] <= lo) & (intervals[..., 1:2] >= hi)  # [q, M, atoms]
    union = np.logical_or.reduceat(covered[:, order], starts, axis=1).astype(np.float64)
    if space is None:
        inside = _overlap(owns[:, :, None, :], np.stack([lo, hi], axis=1)[None, None])
    else:  # elements of each (channel, row, col) box in each atom of the flat axis
        inside = np.zeros((*owns.shape[:2], len(lo)))
        for atom, (a, b) in enumerate(zip(lo, hi, strict=True)):
            for box in flat_boxes(int(a), int(b), space):
                inside[..., atom] += np.prod(_overlap(owns, np.array(box)), axis=-1)
    return np.einsum("qga,pga->pqg", union, inside)
