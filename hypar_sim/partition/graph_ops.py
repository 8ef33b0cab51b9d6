"""What each graph operator reads of its inputs for a box of its loops (a registry).

A member's box gives an interval of every loop dimension of a node (its
output's axes, named by `graph_axes`, the batch N, and the reduction C of a
convolution, an fc layer or a product of two activations). `read` returns
the region of input `index` the member needs for it:

- conv: the window's rows and columns (halo) and its input channels; a grouped
  convolution has a loop G over its groups (split by `groups`) and K and C
  within a group, so a member reads its groups' channels; pool: the window;
  global_pool: the whole map;
- fc: its input features (a feature map flattened: several boxes);
- matmul: A's rows and reduction, B's reduction and columns, per head;
- reshape: the same elements in the input's shape (axis runs of equal size
  map box to box; a run split unevenly becomes several boxes); transpose: the
  box permuted back; slice: shifted; concat: each input its own channels;
- softmax and layer_norm: the whole axis they normalise; every other
  operator: the same box.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass

from hypar_sim.errors import InputError
from hypar_sim.partition.graph_axes import Site, reshape_groups
from hypar_sim.partition.kinds import Dim
from hypar_sim.partition.layout import flat_boxes
from hypar_sim.partition.redistribute import Region
from hypar_sim.workload.graph import Node

Interval = tuple[int, int]
Box = dict[Dim, Interval]  # one member's interval of every loop dimension
Reader = Callable[[Site, Box, int], Region]


def _pair(value: int | list[int]) -> tuple[int, int]:
    return (value, value) if isinstance(value, int) else (value[0], value[1])


def _pads(value: int | list[int]) -> tuple[int, int]:
    """(top, left) of an int, [rows, cols] or [top, left, bottom, right]."""
    return _pair(value) if isinstance(value, int) or len(value) == 2 else (value[0], value[1])


def _window(lo: int, hi: int, stride: int, before: int, span: int, size: int) -> Interval:
    """Input rows a window over output rows [lo, hi) reads, clipped to the map."""
    if hi <= lo:
        return 0, 0
    return max(0, lo * stride - before), min(size, (hi - 1) * stride - before + span)


def _spatial(node: Node, box: Box, kernel: tuple[int, int], stride: tuple[int, int],
             pads: tuple[int, int], dilation: tuple[int, int]) -> tuple[Interval, Interval]:
    _, rows, cols = node.input_shapes[0]
    return (_window(*box[Dim.P], stride[0], pads[0], dilation[0] * (kernel[0] - 1) + 1, rows),
            _window(*box[Dim.Q], stride[1], pads[1], dilation[1] * (kernel[1] - 1) + 1, cols))


def output_box(site: Site, box: Box) -> tuple[Interval, ...]:
    return (box[Dim.N], *(box[d] for d in site.output))


def _group_channels(box: Box, per_group: int, own: tuple[int, int]) -> list[Interval]:
    """Channel ranges of the groups a member's box covers, `own` of each (whole groups:
    one range)."""
    first, last = box[Dim.G]
    lo, hi = own
    if last <= first or hi <= lo:
        return []
    if (lo, hi) == (0, per_group):
        return [(first * per_group, last * per_group)]
    return [(g * per_group + lo, g * per_group + hi) for g in range(first, last)]


def _read_conv(site: Site, box: Box, index: int) -> Region:
    node, a = site.node, site.node.attrs
    rows, cols = _spatial(node, box, _pair(a["kernel"]), _pair(a["stride"]), _pads(a["padding"]),
                          _pair(a["dilation"]))
    per_group_in = node.input_shapes[0][0] // a["groups"]
    if Dim.G in box:
        channels = _group_channels(box, per_group_in, box[Dim.C])
    else:
        channels = [box[Dim.C]] if box[Dim.K][1] > box[Dim.K][0] and \
            box[Dim.C][1] > box[Dim.C][0] else []
    return tuple((box[Dim.N], ch, rows, cols) for ch in channels)


def _conv_outputs(site: Site, box: Box) -> Region:
    """A grouped convolution's output channels: its groups' ranges of the per-group ones."""
    if Dim.G not in box:
        return (output_box(site, box),)
    per_group = site.node.shape[0] // site.node.attrs["groups"]
    return tuple((box[Dim.N], ch, box[Dim.P], box[Dim.Q])
                 for ch in _group_channels(box, per_group, box[Dim.K]))


def conv_loops(node: Node) -> dict[Dim, int]:
    """A grouped convolution's own loops: groups G, and K and C within a group."""
    groups = node.attrs["groups"]
    if groups == 1:
        return {}
    return {Dim.G: groups, Dim.K: node.shape[0] // groups}


def _read_fc(site: Site, box: Box, index: int) -> Region:
    shape = site.node.input_shapes[0]
    if len(shape) == 3:  # a feature map, flattened
        return tuple((box[Dim.N], *part) for part in flat_boxes(*box[Dim.C], shape))
    return ((box[Dim.N], *(box[d] for d in site.inputs[0][:-1]), box[Dim.C]),)


def _read_pool(site: Site, box: Box, index: int) -> Region:
    a = site.node.attrs
    kernel = _pair(a["kernel"])
    stride = _pair(a["stride"] if a["stride"] is not None else a["kernel"])
    rows, cols = _spatial(site.node, box, kernel, stride, _pads(a["padding"]), (1, 1))
    return ((box[Dim.N], box[Dim.K], rows, cols),)


def _read_global(site: Site, box: Box, index: int) -> Region:
    _, rows, cols = site.node.input_shapes[0]
    return ((box[Dim.N], box[Dim.K], (0, rows), (0, cols)),)


def _read_same(site: Site, box: Box, index: int, whole: int | None = None) -> Region:
    """The same box of an input of the same shape (axis `whole`: all of it)."""
    node = site.node
    if node.input_shapes[index] != node.shape:
        raise InputError(f"node {node.name} ({node.op}): input {index} of shape "
                         f"{list(node.input_shapes[index])} is broadcast to "
                         f"{list(node.shape)}; graph planning takes equal shapes")
    axes = [box[d] for d in site.inputs[index]]
    if whole is not None:
        axes[whole] = (0, node.shape[whole])
    return ((box[Dim.N], *axes),)


def _read_softmax(site: Site, box: Box, index: int) -> Region:
    return _read_same(site, box, index, site.node.attrs["axis"] % len(site.node.shape))


def _read_layer_norm(site: Site, box: Box, index: int) -> Region:
    return _read_same(site, box, index, len(site.node.shape) - 1)


def _read_concat(site: Site, box: Box, index: int) -> Region:
    node = site.node
    axis = node.attrs["axis"] % len(node.shape)
    dim = site.output[axis]
    offset = sum(shape[axis] for shape in node.input_shapes[:index])
    lo = max(box[dim][0], offset) - offset
    hi = min(box[dim][1], offset + node.input_shapes[index][axis]) - offset
    if hi <= lo:
        return ()
    axes = list(output_box(site, box))
    axes[axis + 1] = (lo, hi)
    return (tuple(axes),)


def _read_flatten(site: Site, box: Box, index: int) -> Region:
    return tuple((box[Dim.N], *part) for part in flat_boxes(*box[Dim.K],
                                                             site.node.input_shapes[0]))


def _read_embedding(site: Site, box: Box, index: int) -> Region:
    return ((box[Dim.N], box[site.output[0]]),)


def _read_slice(site: Site, box: Box, index: int) -> Region:
    a = site.node.attrs
    axis = a["axis"] % len(site.node.shape)
    axes = list(output_box(site, box))
    lo, hi = axes[axis + 1]
    axes[axis + 1] = (lo + a["start"], hi + a["start"])
    return (tuple(axes),)


def _read_transpose(site: Site, box: Box, index: int) -> Region:
    perm = site.node.attrs["perm"]
    axes: list[Interval] = [(0, 0)] * len(perm)
    for j, p in enumerate(perm):
        axes[p] = box[site.output[j]]
    return ((box[Dim.N], *axes),)


def _read_reshape(site: Site, box: Box, index: int) -> Region:
    """Each run of axes maps on its own: flat ranges of the output run, cut into boxes of
    the input run's shape."""
    node = site.node
    source, target = node.input_shapes[0], node.shape
    parts: list[list[tuple[Interval, ...]]] = []
    for ins, outs in reshape_groups(source, target):
        out_shape = [target[j] for j in outs]
        in_shape = [source[i] for i in ins]
        ranges = [box[site.output[j]] for j in outs]
        pieces = []
        for start in _runs(ranges, out_shape):
            pieces += flat_boxes(*start, in_shape) if in_shape else [()]
        parts.append(pieces)
    return tuple((box[Dim.N], *itertools.chain.from_iterable(combo))
                 for combo in itertools.product(*parts))


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


def _read_matmul(site: Site, box: Box, index: int) -> Region:
    node = site.node
    lead = [box[d] for d in site.output[:-2]]
    rows, columns, inner = box[site.output[-2]], box[site.output[-1]], box[Dim.C]
    if index == 0:
        return ((box[Dim.N], *lead, rows, inner),)
    pair = (columns, inner) if node.attrs["transpose_b"] else (inner, columns)
    return ((box[Dim.N], *lead, *pair),)


@dataclass(frozen=True)
class NodeOp:
    """How one operator is split: what it reads, the extent of its reduction C (if it has
    one), its weights' (shape, each member's region, values per entry), its learned values
    per output channel (`vectors`: a bias, a norm's scale and shift), whether its one
    channel dimension takes both `in` and `out` (weightless operators), the region of its
    output a member makes (`outputs`) and loops beside its output's axes (`loops`)."""

    read: Reader
    reduction: Callable[[Node], int] | None = None
    weight_scale: Callable[[Node], int] | None = None
    channel_alias: bool = False
    vectors: Callable[[Node], int] = lambda node: 0
    outputs: Callable[[Site, Box], Region] = lambda site, box: (output_box(site, box),)
    loops: Callable[[Node], dict[Dim, int]] = lambda node: {}  # loops replaced or added


def _bias(node: Node) -> int:
    return int(node.attrs["bias"])


def _affine(node: Node) -> int:
    return 2 * int(node.attrs["affine"])


def _fc_scale(node: Node) -> int:
    return 0 if node.attrs["tied_to"] else 1  # a tied projection's gradient is its owner's


NODE_OPS: dict[str, NodeOp] = {
    "conv": NodeOp(_read_conv, lambda n: n.input_shapes[0][0] // n.attrs["groups"],
                   lambda n: math.prod(_pair(n.attrs["kernel"])), vectors=_bias,
                   outputs=_conv_outputs, loops=conv_loops),
    "fc": NodeOp(_read_fc, lambda n: math.prod(n.input_shapes[0]) if len(n.input_shapes[0])
                 == 3 else n.input_shapes[0][-1], _fc_scale, vectors=_bias),
    "matmul": NodeOp(_read_matmul, lambda n: n.input_shapes[0][-1]),
    "embedding": NodeOp(_read_embedding, weight_scale=lambda n: 1),
    "pool": NodeOp(_read_pool, channel_alias=True),
    "global_pool": NodeOp(_read_global, channel_alias=True),
    "concat": NodeOp(_read_concat, channel_alias=True),
    "flatten": NodeOp(_read_flatten, channel_alias=True),
    "reshape": NodeOp(_read_reshape, channel_alias=True),
    "transpose": NodeOp(_read_transpose, channel_alias=True),
    "slice": NodeOp(_read_slice, channel_alias=True),
    "softmax": NodeOp(_read_softmax, channel_alias=True),
    "layer_norm": NodeOp(_read_layer_norm, channel_alias=True, vectors=_affine),
    "batch_norm": NodeOp(_read_same, channel_alias=True, vectors=_affine),
    **{op: NodeOp(_read_same, channel_alias=True)
       for op in ("add", "mul", "act", "dropout", "lrn", "identity", "tensor_op")},
}


def weight_shape(node: Node) -> tuple[int, int]:
    """(rows, columns) of a node's weight matrix: (K, C), or an embedding's (vocab, K)."""
    if node.op == "embedding":
        return node.attrs["vocab"], node.attrs["dim"]
    return node.shape[0] if node.op != "fc" else node.shape[-1], NODE_OPS[node.op].reduction(node)
