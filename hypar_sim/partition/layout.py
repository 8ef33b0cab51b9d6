"""The `layout` traffic model: per-member transfers from the members' real layouts.

For a chain of layers split by columns (a kind per level per layer), every
tensor that crosses a layer boundary is redistributed by the one rule of
`redistribute` (needs minus holds; partial sums reduce-scattered into the
layout the consumer needs):

=====================  ==========================  ============================
step (TransferKind)    contributions               needs
=====================  ==========================  ============================
PARTIAL_SUM(l)         F_{l+1} by layer l, partial  (who will need it, below)
                       over C if l splits C
RELAYOUT_FEATURE(l+1)  holders after the reduce    layer l+1's input, with halo
ERROR_REDUCE(l+1)      E_{l+1} by layer l+1,       layer l's output box
                       partial over K, halo rows
ERROR_GATHER(l)        holders after that reduce   layer l's output box
GRADIENT(l)            dW_l, partial over N, rows  the weights each member holds
GRADIENT_GATHER(l)     holders after the reduce    the same
=====================  ==========================  ============================

Conventions: the network input has whatever layout the first layer wants and
no error is computed for it; the loss takes the last output wherever its
reduction leaves it (an even reduce-scatter over the contributors) and
returns the error in that layout. Boundary tensors live in the producer's
output space after pooling (N, K, rows, columns); a partial output is
reduced before pooling, so its reduce stage counts pre-pooling elements
(pooled elements x the layer's pre/post pooling size ratio). An fc layer's
input channels are the producer's output flattened (channel, row, column).

On one two-way level without pooling, with A the bytes of the tensor in the
pair's share, this gives HyPar's Table 1 and 2 totals (per direction): a
batch layer's gradient A(dW) (reduce A/2, gather A/2); an in layer's output
A(F') (reduce A/2 forward, gather of the error A/2 backward); batch -> in
A(F)/4 forward and A(E)/4 backward; in -> batch, in -> in, batch -> batch
nothing beyond those. It differs from `paper` in that the in-layer's
reduction is charged before pooling (4x the pooled bytes for 2x2 pooling),
and in that several levels are costed on the members' real boxes rather
than level by level on shares.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from hypar_sim.partition.hierarchy import Hierarchy
from hypar_sim.partition.kinds import Dim
from hypar_sim.partition.operators import extents
from hypar_sim.partition.redistribute import Moved, Region, redistribute
from hypar_sim.partition.shares import (
    Column,
    conv_spans,
    input_spans,
    member_intervals,
)
from hypar_sim.partition.steps import TransferKind
from hypar_sim.workload.layers import Layer, LayerKind

Matrix = Moved  # bytes between members (the nonzero entries of [src, dst])


@dataclass(frozen=True)
class Boxes:
    """Every member's interval of every loop dimension of one layer ([members, 2] each)."""

    layer: Layer
    parts: dict[Dim, np.ndarray]

    @classmethod
    def of(cls, layer: Layer, batch: int, column: Column, hierarchy: Hierarchy) -> Boxes:
        """The boxes of `layer` under `column` (cached; the arrays are read-only)."""
        return _boxes(layer, batch, column, hierarchy)

    def interval(self, dim: Dim, member: int) -> tuple[int, int]:
        lo, hi = self.parts[dim][member]
        return int(lo), int(hi)

    @property
    def batch(self) -> int:
        return int(self.parts[Dim.N][:, 1].max())

    @property
    def members(self) -> int:
        return len(self.parts[Dim.N])

    def output_regions(self) -> list[Region]:
        """(N, K, rows, cols) after pooling: what each member computes of its output."""
        return [((self.interval(Dim.N, m), self.interval(Dim.K, m), self.interval(Dim.P, m),
                  self.interval(Dim.Q, m)),) for m in range(self.members)]

    def input_regions(self, space: tuple[int, int, int]) -> list[Region]:
        """What each member reads of its input, in the producer's output space
        (channels, rows, cols) = `space`; halo rows included."""
        layer = self.layer
        batch = self.parts[Dim.N].tolist()
        if layer.kind is LayerKind.FC:
            return [tuple((tuple(n), *box) for box in flat_boxes(c0, c1, space))
                    for n, (c0, c1) in zip(batch, self.parts[Dim.C].tolist(), strict=True)]
        rows, cols = (input_spans(layer, conv_spans(layer, self.parts[dim], axis), axis).tolist()
                      for dim, axis in ((Dim.P, "rows"), (Dim.Q, "cols")))
        return [((tuple(n), tuple(c), tuple(r), tuple(q)),) for n, c, r, q in
                zip(batch, self.parts[Dim.C].tolist(), rows, cols, strict=True)]

    def weight_regions(self) -> list[Region]:
        """(K, C) of the weights each member holds (R x S each)."""
        return [((self.interval(Dim.K, m), self.interval(Dim.C, m)),) for m in range(self.members)]


@lru_cache(maxsize=65536)
def _boxes(layer: Layer, batch: int, column: Column, hierarchy: Hierarchy) -> Boxes:
    return Boxes(layer, {dim: member_intervals(total, column, hierarchy, dim)
                         for dim, total in extents(layer, batch).items()})


def flat_boxes(start: int, stop: int, shape: Sequence[int]) -> list[tuple[tuple[int, int], ...]]:
    """The flat index range [start, stop) of a C-order array of `shape` as disjoint boxes."""
    if start >= stop:
        return []
    if len(shape) == 1:
        return [((start, stop),)]
    inner = int(np.prod(shape[1:]))
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


def boundary_transfers(producer: Boxes, consumer: Boxes | None, word_bytes: int) -> dict[
        tuple[int, TransferKind], Matrix]:
    """Forward and backward transfers across the boundary after layer `producer`
    (consumer None: the loss). Keys are (0, kind) for the producer's own steps and
    (1, kind) for the consumer's."""
    layer = producer.layer
    out = layer.output
    shape = (producer.batch, out.channels, out.height, out.width)
    pooled = layer.conv_output.size / out.size  # pre-pooling elements per pooled one
    produced = producer.output_regions()
    if consumer is None:
        loss = redistribute(shape, produced, None)
        return {(0, TransferKind.PARTIAL_SUM): loss.reduce * (word_bytes * pooled),
                (0, TransferKind.ERROR_GATHER):
                    loss.returned() * word_bytes}
    needed = consumer.input_regions(shape[1:])
    forward = redistribute(shape, produced, needed)
    backward = redistribute(shape, needed, produced)
    return {(0, TransferKind.PARTIAL_SUM): forward.reduce * (word_bytes * pooled),
            (1, TransferKind.RELAYOUT_FEATURE): forward.gather * word_bytes,
            (1, TransferKind.ERROR_REDUCE): backward.reduce * word_bytes,
            (0, TransferKind.ERROR_GATHER): backward.gather * word_bytes}


def gradient_transfers(boxes: Boxes, word_bytes: int) -> dict[TransferKind, Matrix]:
    """All-reduce of the weight gradient over the members that hold the same weights."""
    layer = boxes.layer
    regions = boxes.weight_regions()
    scale = word_bytes * layer.kernel ** 2
    stages = redistribute((layer.output.channels, layer.input.channels), regions, regions)
    return {TransferKind.GRADIENT: stages.reduce * scale,
            TransferKind.GRADIENT_GATHER: stages.gather * scale}


def chain_transfers(layers: Sequence[Layer], batch: int, columns: Sequence[Column],
                    hierarchy: Hierarchy, word_bytes: int) -> dict[tuple[int, TransferKind],
                                                                   Matrix]:
    """Every step of the chain: (layer index, kind) -> bytes [src, dst]."""
    boxes = [Boxes.of(layer, batch, column, hierarchy)
             for layer, column in zip(layers, columns, strict=True)]
    steps: dict[tuple[int, TransferKind], Matrix] = {}
    for index, own in enumerate(boxes):
        for kind, matrix in gradient_transfers(own, word_bytes).items():
            steps[(index, kind)] = matrix
        consumer = boxes[index + 1] if index + 1 < len(boxes) else None
        for (offset, kind), matrix in boundary_transfers(own, consumer, word_bytes).items():
            steps[(index + offset, kind)] = matrix
    return steps
