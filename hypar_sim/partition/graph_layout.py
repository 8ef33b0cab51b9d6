"""The layout model on graph networks: every node is split by its own column.

Every node of a graph (`workload.graph`) is a unit of the plan, weightless
ones included (Tofu's view: each operator states its loop dimensions and
which of them index its tensors). A node's column splits its loop
dimensions; every member holds a box of its output and reads boxes of its
inputs, and every edge (a tensor from its producer to one consumer) is
redistributed by the one rule of `redistribute`, forward (the producer's
output, partial where it split a reduction, into the consumer's reads) and
backward (the consumer's input errors, partial where it split one of their
reductions, into the producer's output boxes). A tensor read by several
consumers is redistributed once per consumer (a partial output read by two
consumers is reduced for each: the first release counts it that way).

Loop dimensions per operator (per sample shapes; N the batch):

==============================  ==========================  =====================
operator                        loops                       reads
==============================  ==========================  =====================
conv (groups g)                 N, K, C (per group), P, Q   rows of the window;
                                                            the groups' channels
fc                              N, K, C (input flattened)   the flattened range
pool, global_pool               N, channels, P, Q           rows of the window
add, mul, concat                N, channels, P, Q           the same box (concat:
                                                            each input its part)
flatten                         N, features                 the flattened range
batch_norm, act, dropout, lrn,  N, channels, P, Q           the same box
identity
==============================  ==========================  =====================

Where a node has one channel dimension (every weightless one), both `in` and
`out` split it, so HyPar's {batch, in} can keep a channel split through a
batch norm and an activation. Batch norm statistics are per member (as
frameworks compute them by default); a global pool over split rows is a
partial sum like any other. Transformer operators (matmul of activations,
reshape, transpose, softmax, embeddings) are not planned yet.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from hypar_sim.errors import InputError
from hypar_sim.partition.hierarchy import Hierarchy
from hypar_sim.partition.kinds import KINDS, Dim
from hypar_sim.partition.layout import flat_boxes
from hypar_sim.partition.redistribute import Region, gather_stage, redistribute
from hypar_sim.partition.shares import Column, level_intervals
from hypar_sim.workload.graph import Node

Box = dict[Dim, tuple[int, int]]  # one member's interval of every loop dimension
Reader = Callable[[Node, Box, int], Region]


def _feature(node: Node) -> dict[Dim, int]:
    """Loops of a node that makes a feature map (channels, rows, columns) or a vector."""
    shape = node.shape
    if len(shape) == 3:
        return {Dim.K: shape[0], Dim.P: shape[1], Dim.Q: shape[2]}
    if len(shape) == 1:
        return {Dim.K: shape[0]}
    raise InputError(f"node {node.name} ({node.op}): output {list(shape)} is not a feature "
                     "map or a vector; graph planning takes CNN graphs so far")


def _window(lo: int, hi: int, stride: int, before: int, span: int, size: int) -> tuple[int,
                                                                                         int]:
    """Input rows a window over output rows [lo, hi) reads, clipped to the map."""
    if hi <= lo:
        return 0, 0
    return max(0, lo * stride - before), min(size, (hi - 1) * stride - before + span)


def _spatial(node: Node, box: Box, kernel: tuple[int, int], stride: tuple[int, int],
             pads: tuple[int, int], dilation: tuple[int, int]) -> tuple[tuple[int, int], ...]:
    _, rows, cols = node.input_shapes[0]
    return (_window(*box[Dim.P], stride[0], pads[0], dilation[0] * (kernel[0] - 1) + 1, rows),
            _window(*box[Dim.Q], stride[1], pads[1], dilation[1] * (kernel[1] - 1) + 1, cols))


def _pair(value: int | list[int]) -> tuple[int, int]:
    return (value, value) if isinstance(value, int) else (value[0], value[1])


def _pads(value: int | list[int]) -> tuple[int, int]:
    """(top, left) of an int, [rows, cols] or [top, left, bottom, right]."""
    return _pair(value) if isinstance(value, int) or len(value) == 2 else (value[0], value[1])


def _read_conv(node: Node, box: Box, index: int) -> Region:
    a = node.attrs
    rows, cols = _spatial(node, box, _pair(a["kernel"]), _pair(a["stride"]), _pads(a["padding"]),
                          _pair(a["dilation"]))
    per_group_out = node.shape[0] // a["groups"]
    per_group_in = node.input_shapes[0][0] // a["groups"]
    (k0, k1), (c0, c1) = box[Dim.K], box[Dim.C]
    if k1 <= k0 or c1 <= c0:
        return ()
    first, last = k0 // per_group_out, (k1 - 1) // per_group_out
    if (c0, c1) == (0, per_group_in):
        channels = [(first * per_group_in, (last + 1) * per_group_in)]
    else:
        channels = [(g * per_group_in + c0, g * per_group_in + c1) for g in range(first, last + 1)]
    return tuple((box[Dim.N], ch, rows, cols) for ch in channels)


def _read_fc(node: Node, box: Box, index: int) -> Region:
    c0, c1 = box[Dim.C]
    shape = node.input_shapes[0]
    return tuple((box[Dim.N], *part) for part in flat_boxes(c0, c1, shape))


def _read_pool(node: Node, box: Box, index: int) -> Region:
    a = node.attrs
    kernel = _pair(a["kernel"])
    stride = _pair(a["stride"] if a["stride"] is not None else a["kernel"])
    rows, cols = _spatial(node, box, kernel, stride, _pads(a["padding"]), (1, 1))
    return ((box[Dim.N], box[Dim.K], rows, cols),)


def _read_global(node: Node, box: Box, index: int) -> Region:
    _, rows, cols = node.input_shapes[0]
    return ((box[Dim.N], box[Dim.K], (0, rows), (0, cols)),)


def _read_same(node: Node, box: Box, index: int) -> Region:
    if node.input_shapes[index] != node.shape:
        raise InputError(f"node {node.name} ({node.op}): input {index} of shape "
                         f"{list(node.input_shapes[index])} is broadcast to "
                         f"{list(node.shape)}; graph planning takes equal shapes")
    return (_output_box(node, box),)


def _read_concat(node: Node, box: Box, index: int) -> Region:
    if node.attrs["axis"] != 0:
        raise InputError(f"node {node.name} (concat): graph planning takes concatenations "
                         "along channels (axis 0)")
    offset = sum(shape[0] for shape in node.input_shapes[:index])
    lo = max(box[Dim.K][0], offset) - offset
    hi = min(box[Dim.K][1], offset + node.input_shapes[index][0]) - offset
    if hi <= lo:
        return ()
    return ((box[Dim.N], (lo, hi), *_output_box(node, box)[2:]),)


def _read_flatten(node: Node, box: Box, index: int) -> Region:
    k0, k1 = box[Dim.K]
    return tuple((box[Dim.N], *part) for part in flat_boxes(k0, k1, node.input_shapes[0]))


def _output_box(node: Node, box: Box) -> tuple[tuple[int, int], ...]:
    if len(node.shape) == 3:
        return box[Dim.N], box[Dim.K], box[Dim.P], box[Dim.Q]
    return box[Dim.N], box[Dim.K]


@dataclass(frozen=True)
class NodeOp:
    """How one operator is split: extra loops beside its output's, what it reads, its
    weights ((K, C) per member, x `weight_scale` values each; `vectors` more per output
    channel: a bias, a norm's scale and shift), and whether its one channel dimension takes
    both `in` and `out` (weightless operators)."""

    read: Reader
    reduction: Callable[[Node], int] | None = None  # the extent of C, if it has one
    weight_scale: Callable[[Node], int] | None = None
    channel_alias: bool = False
    vectors: Callable[[Node], int] = lambda node: 0  # learned values per output channel


def _conv_scale(node: Node) -> int:
    return math.prod(_pair(node.attrs["kernel"]))


def _bias(node: Node) -> int:
    return int(node.attrs["bias"])


NODE_OPS: dict[str, NodeOp] = {
    "conv": NodeOp(_read_conv, lambda n: n.input_shapes[0][0] // n.attrs["groups"],
                   _conv_scale, vectors=_bias),
    "fc": NodeOp(_read_fc, lambda n: math.prod(n.input_shapes[0]), lambda n: 1,
                 vectors=_bias),
    "batch_norm": NodeOp(_read_same, channel_alias=True,
                         vectors=lambda n: 2 * int(n.attrs["affine"])),
    "pool": NodeOp(_read_pool, channel_alias=True),
    "global_pool": NodeOp(_read_global, channel_alias=True),
    "add": NodeOp(_read_same, channel_alias=True),
    "mul": NodeOp(_read_same, channel_alias=True),
    "concat": NodeOp(_read_concat, channel_alias=True),
    "flatten": NodeOp(_read_flatten, channel_alias=True),
    **{op: NodeOp(_read_same, channel_alias=True)
       for op in ("act", "dropout", "lrn", "identity")},
}


def node_op(node: Node) -> NodeOp:
    if node.op not in NODE_OPS:
        raise InputError(f"node {node.name}: graph planning does not take {node.op} nodes yet; "
                         f"it takes {', '.join(NODE_OPS)}")
    return NODE_OPS[node.op]


def loops(node: Node, batch: int) -> dict[Dim, int]:
    """Every loop dimension of `node` and its extent."""
    op = node_op(node)
    sizes = {Dim.N: batch, **_feature(node)}
    if op.reduction is not None:
        sizes[Dim.C] = op.reduction(node)
    return sizes


def _dim_of(op: NodeOp, kind: str) -> Dim:
    dim = KINDS[kind].dim
    return Dim.K if op.channel_alias and dim is Dim.C else dim


def offered(node: Node, batch: int, column: Column, hierarchy: Hierarchy) -> bool:
    """Every level's kind splits a loop dimension of the node and leaves each member at
    least one index of it."""
    op, sizes = node_op(node), loops(node, batch)
    parts = dict.fromkeys(sizes, 1)
    for size, kind in zip(hierarchy.sizes, column, strict=True):
        dim = _dim_of(op, kind)
        if dim not in sizes or sizes[dim] // parts[dim] < size:
            return False
        parts[dim] *= size
    return True


@dataclass(frozen=True)
class NodeLayout:
    """Every member's box of every loop dimension of one node."""

    node: Node
    boxes: dict[Dim, np.ndarray]  # [members, 2]

    @property
    def members(self) -> int:
        return len(self.boxes[Dim.N])

    def box(self, member: int) -> Box:
        return {dim: (int(parts[member, 0]), int(parts[member, 1]))
                for dim, parts in self.boxes.items()}

    def outputs(self) -> list[Region]:
        return [(_output_box(self.node, self.box(m)),) for m in range(self.members)]

    def reads(self, index: int) -> list[Region]:
        read = node_op(self.node).read
        return [read(self.node, self.box(m), index) for m in range(self.members)]


def layout(node: Node, batch: int, column: Column, hierarchy: Hierarchy) -> NodeLayout:
    op = node_op(node)
    boxes = {}
    for dim, extent in loops(node, batch).items():
        levels = tuple(h for h, kind in enumerate(column) if _dim_of(op, kind) is dim)
        boxes[dim] = level_intervals(extent, levels, hierarchy)
    return NodeLayout(node, boxes)


def _tensor(node: Node, batch: int) -> tuple[int, ...]:
    return (batch, *node.shape)


def edge_matrices(producer: NodeLayout, consumer: NodeLayout, index: int, batch: int,
                  word_bytes: int) -> dict[str, np.ndarray]:
    """Bytes [src, dst] of the four stages of the edge into the consumer's input `index`."""
    shape = _tensor(producer.node, batch)
    made, read = producer.outputs(), consumer.reads(index)
    forward = redistribute(shape, made, read)
    backward = redistribute(shape, read, made)
    return {"forward reduce": forward.reduce * word_bytes,
            "forward gather": forward.gather * word_bytes,
            "backward reduce": backward.reduce * word_bytes,
            "backward gather": backward.gather * word_bytes}


def own_matrices(own: NodeLayout, batch: int, word_bytes: int,
                 is_output: bool) -> dict[str, np.ndarray]:
    """Bytes [src, dst] of a node's gradient all-reduce (weights, biases, a norm's scale
    and shift), and of the loss if it is an output of the graph (its partial values
    reduced wherever the reduction leaves them; the error goes back the same way)."""
    node, op = own.node, node_op(own.node)
    result = {}
    if op.weight_scale is not None:
        regions = [((own.box(m)[Dim.K], own.box(m)[Dim.C]),) for m in range(own.members)]
        stages = redistribute((node.shape[0], op.reduction(node)), regions, regions)
        scale = word_bytes * op.weight_scale(node)
        result.update({"gradient reduce": stages.reduce * scale,
                       "gradient gather": stages.gather * scale})
    vectors = op.vectors(node)
    if vectors:  # a bias or a norm's scale and shift: one value per output channel each
        regions = [((own.box(m)[Dim.K],),) for m in range(own.members)]
        stages = redistribute((node.shape[0],), regions, regions)
        scale = word_bytes * vectors
        result.update({"vector reduce": stages.reduce * scale,
                       "vector gather": stages.gather * scale})
    if is_output:
        loss = redistribute(_tensor(node, batch), own.outputs(), None)
        result.update({"loss reduce": loss.reduce * word_bytes,
                       "loss gather": gather_stage(loss.holders, loss.contrib, loss.volume)
                       * word_bytes})
    return result


def geometry(node: Node) -> tuple:
    """What a node's costs depend on (not its name nor its inputs' names)."""
    def frozen(value: object) -> object:
        return tuple(frozen(v) for v in value) if isinstance(value, list | tuple) else value
    return (node.op, node.input_shapes, node.shape,
            tuple(sorted((k, frozen(v)) for k, v in node.attrs.items())))


class Costs:
    """Total bytes of edges and of nodes' own steps, remembered by geometry (a network
    repeats its blocks) for one planning run."""

    def __init__(self, batch: int, word_bytes: int) -> None:
        self.batch, self.word_bytes = batch, word_bytes
        self._edges: dict[tuple, float] = {}
        self._own: dict[tuple, float] = {}

    def edge(self, producer: Node, consumer: Node, index: int, producer_column: Column,
             column: Column, hierarchy: Hierarchy) -> float:
        key = (geometry(producer), geometry(consumer), index, producer_column, column,
               hierarchy)
        if key not in self._edges:
            matrices = edge_matrices(layout(producer, self.batch, producer_column, hierarchy),
                                     layout(consumer, self.batch, column, hierarchy), index,
                                     self.batch, self.word_bytes)
            self._edges[key] = float(sum(m.sum() for m in matrices.values()))
        return self._edges[key]

    def own(self, node: Node, column: Column, hierarchy: Hierarchy, is_output: bool) -> float:
        key = (geometry(node), column, hierarchy, is_output)
        if key not in self._own:
            matrices = own_matrices(layout(node, self.batch, column, hierarchy), self.batch,
                                    self.word_bytes, is_output)
            self._own[key] = float(sum(m.sum() for m in matrices.values()))
        return self._own[key]
