"""Operators of a graph network: their attributes, shape inference, parameters and MACs.

Every operator kind is one `OpSpec` in the registry `OPS` (name -> spec): the
YAML reader, the ONNX importer, the `networks` listing and the error
messages all find operators there. Shapes are per sample (the batch is
applied by whoever uses the graph): (channels, rows, columns) for feature
maps, (sequence, features) for token streams, (heads, sequence, features) in
attention, (sequence,) for token ids.

Counting conventions (stated once, used everywhere):

- `params`: learnable values, biases and normalisation scales and shifts
  included (the totals published for ResNet, BERT and GPT-2 count them);
  weights shared with another node (`tied_to`) are counted once, at the
  node that owns them.
- `macs`: multiply-accumulates of the forward pass of matrix products and
  convolutions (a convolution or fc layer's weights x output positions; a
  product of two activations m x k x n per head). Weightless operators
  (pooling, normalisation, activations, softmax, additions) have no MACs;
  what they cost in memory traffic and vector work is the hardware model's
  business (`hardware.graph_costs`: the elements each member reads and writes).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from hypar_sim.errors import InputError

Shape = tuple[int, ...]  # per sample
Attrs = Mapping[str, Any]

#: Largest size accepted for any dimension or attribute (keeps byte counts exact in floats).
MAX_SIZE = 2**24


def positive(where: str, value: Any, minimum: int = 1) -> int:
    """`value` as an integer in [minimum, MAX_SIZE], or a one-line InputError."""
    if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= MAX_SIZE:
        raise InputError(f"{where}: must be an integer from {minimum} to {MAX_SIZE}, "
                         f"got {value!r}")
    return value


def pair(where: str, value: Any, minimum: int = 1) -> tuple[int, int]:
    """An int or a [rows, cols] list as a pair."""
    if isinstance(value, list | tuple):
        if len(value) != 2:
            raise InputError(f"{where}: must be an integer or a [rows, columns] pair, "
                             f"got {value!r}")
        return positive(where, value[0], minimum), positive(where, value[1], minimum)
    number = positive(where, value, minimum)
    return number, number


def pads(where: str, value: Any) -> tuple[int, int, int, int]:
    """Padding as (top, left, bottom, right): an int, [rows, cols] or ONNX's four."""
    if isinstance(value, list | tuple) and len(value) == 4:
        top, left, bottom, right = (positive(where, v, 0) for v in value)
        return top, left, bottom, right
    rows, cols = pair(where, value, 0)
    return rows, cols, rows, cols


def _flag(where: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise InputError(f"{where}: must be true or false, got {value!r}")
    return value


def _choice(where: str, value: Any, allowed: Sequence[str]) -> str:
    if value not in allowed:
        raise InputError(f"{where}: must be one of {', '.join(allowed)}, got {value!r}")
    return value


def _window(size: int, kernel: int, stride: int, before: int, after: int, dilation: int = 1,
            ceil_mode: bool = False) -> int:
    """Output positions of a sliding window (ValueError if it does not fit)."""
    span = dilation * (kernel - 1) + 1
    padded = size + before + after
    if span > padded:
        raise ValueError(f"window {span} is larger than its padded input {padded}")
    steps = (padded - span) / stride
    out = (math.ceil(steps) if ceil_mode else math.floor(steps)) + 1
    if ceil_mode and (out - 1) * stride >= size + before:
        out -= 1  # a last window that would start in the padding is dropped
    return out


@dataclass(frozen=True)
class Counts:
    """What a node is: its output shape, parameters and forward MACs (per sample)."""

    shape: Shape
    params: int = 0
    macs: int = 0


@dataclass(frozen=True)
class OpSpec:
    """One operator kind: how many inputs it takes (`arity`: fewest, most or None for any
    number), its attributes (required, optional with defaults) and what it computes."""

    name: str
    summary: str
    required: tuple[str, ...]
    optional: Mapping[str, Any]
    count: Callable[[str, Attrs, list[Shape]], Counts]
    arity: tuple[int, int | None] = (1, 1)
    weighted: bool = False

    def attributes(self, where: str, given: Attrs) -> dict[str, Any]:
        """The node's attributes with defaults filled in; unknown or missing: InputError."""
        allowed = {*self.required, *self.optional}
        for key in given:
            if key not in allowed:
                names = ", ".join(sorted(allowed)) or "none"
                raise InputError(f"{where}: unknown field '{key}' for a {self.name} node; "
                                 f"allowed: {names}")
        for key in self.required:
            if key not in given:
                raise InputError(f"{where}: missing field '{key}' (a {self.name} node needs "
                                 f"{', '.join(self.required)})")
        return {**self.optional, **given}


OPS: dict[str, OpSpec] = {}


def register_op(spec: OpSpec) -> OpSpec:
    """Add an operator kind (a new name only)."""
    if spec.name in OPS:
        raise ValueError(f"operator {spec.name!r} is registered already")
    OPS[spec.name] = spec
    return spec


def _rank(where: str, shape: Shape, ranks: Sequence[int], what: str) -> None:
    if len(shape) not in ranks:
        raise InputError(f"{where}: input of shape {list(shape)} is not {what}")


def _conv(where: str, a: Attrs, shapes: list[Shape]) -> Counts:
    _rank(where, shapes[0], (3,), "a feature map (channels, rows, columns)")
    channels, rows, cols = shapes[0]
    out = positive(f"{where}.out_channels", a["out_channels"])
    groups = positive(f"{where}.groups", a["groups"])
    if channels % groups or out % groups:
        raise InputError(f"{where}.groups: {groups} does not divide the {channels} input and "
                         f"{out} output channels")
    kh, kw = pair(f"{where}.kernel", a["kernel"])
    sh, sw = pair(f"{where}.stride", a["stride"])
    dh, dw = pair(f"{where}.dilation", a["dilation"])
    top, left, bottom, right = pads(f"{where}.padding", a["padding"])
    try:
        height = _window(rows, kh, sh, top, bottom, dh)
        width = _window(cols, kw, sw, left, right, dw)
    except ValueError as exc:
        raise InputError(f"{where}: {exc} (input {list(shapes[0])})") from None
    weights = out * (channels // groups) * kh * kw
    bias = out if _flag(f"{where}.bias", a["bias"]) else 0
    return Counts((out, height, width), weights + bias, weights * height * width)


def _fc(where: str, a: Attrs, shapes: list[Shape]) -> Counts:
    """A feature map (rank 3) is flattened first (the chain networks' convention); a token
    stream (rank 1 or 2) is transformed along its last axis, position by position."""
    shape = shapes[0]
    out = positive(f"{where}.out_features", a["out_features"])
    rows, features = (1, math.prod(shape)) if len(shape) == 3 else \
        (math.prod(shape[:-1]), shape[-1])
    lead = shape[:-1] if len(shape) < 3 else ()
    owned = not a["tied_to"]
    bias = out if _flag(f"{where}.bias", a["bias"]) else 0
    params = (features * out) * owned + bias
    return Counts((*lead, out), params, rows * features * out)


def _matmul(where: str, a: Attrs, shapes: list[Shape]) -> Counts:
    """A (..., m, k) x B (..., k, n), B given as (..., n, k) with `transpose_b`."""
    left, right = shapes
    if len(left) < 2 or len(right) < 2:
        raise InputError(f"{where}: matmul inputs need two or more axes, got {list(left)} "
                         f"and {list(right)}")
    m, k = left[-2:]
    n, k2 = (right[-2], right[-1]) if _flag(f"{where}.transpose_b", a["transpose_b"]) else \
        (right[-1], right[-2])
    if k != k2:
        raise InputError(f"{where}: inner sizes differ ({list(left)} x {list(right)}, "
                         f"transpose_b {a['transpose_b']})")
    lead = _broadcast(where, [left[:-2], right[:-2]])
    return Counts((*lead, m, n), 0, math.prod(lead) * m * k * n)


def _broadcast(where: str, shapes: list[Shape]) -> Shape:
    """numpy's broadcasting of per-sample shapes, or an InputError."""
    rank = max(len(s) for s in shapes)
    out = []
    for axis in range(rank):
        sizes = {s[axis - rank + len(s)] for s in shapes if axis - rank + len(s) >= 0} - {1}
        if len(sizes) > 1:
            raise InputError(f"{where}: shapes {[list(s) for s in shapes]} do not match")
        out.append(sizes.pop() if sizes else 1)
    return tuple(out)


def _pool(where: str, a: Attrs, shapes: list[Shape]) -> Counts:
    _rank(where, shapes[0], (3,), "a feature map (channels, rows, columns)")
    channels, rows, cols = shapes[0]
    _choice(f"{where}.mode", a["mode"], ("max", "avg"))
    kh, kw = pair(f"{where}.kernel", a["kernel"])
    sh, sw = pair(f"{where}.stride", a["stride"] if a["stride"] is not None else a["kernel"])
    top, left, bottom, right = pads(f"{where}.padding", a["padding"])
    ceil_mode = _flag(f"{where}.ceil_mode", a["ceil_mode"])
    try:
        return Counts((channels, _window(rows, kh, sh, top, bottom, ceil_mode=ceil_mode),
                       _window(cols, kw, sw, left, right, ceil_mode=ceil_mode)))
    except ValueError as exc:
        raise InputError(f"{where}: {exc} (input {list(shapes[0])})") from None


def _global_pool(where: str, a: Attrs, shapes: list[Shape]) -> Counts:
    _rank(where, shapes[0], (3,), "a feature map (channels, rows, columns)")
    _choice(f"{where}.mode", a["mode"], ("max", "avg"))
    return Counts((shapes[0][0], 1, 1))


def _same(where: str, a: Attrs, shapes: list[Shape]) -> Counts:
    return Counts(shapes[0])


def _elementwise(where: str, a: Attrs, shapes: list[Shape]) -> Counts:
    return Counts(_broadcast(where, shapes))


def _act(where: str, a: Attrs, shapes: list[Shape]) -> Counts:
    _choice(f"{where}.function", a["function"], ACTIVATIONS)
    return Counts(shapes[0])


def _axis(where: str, value: Any, rank: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not -rank <= value < rank:
        raise InputError(f"{where}: must be an axis from {-rank} to {rank - 1}, got {value!r}")
    return value % rank


def _concat(where: str, a: Attrs, shapes: list[Shape]) -> Counts:
    rank = len(shapes[0])
    axis = _axis(f"{where}.axis", a["axis"], rank)
    for shape in shapes[1:]:
        if len(shape) != rank or any(s != t for i, (s, t) in enumerate(zip(shape, shapes[0],
                                                                          strict=True))
                                     if i != axis):
            raise InputError(f"{where}: cannot concatenate shapes "
                             f"{[list(s) for s in shapes]} along axis {axis}")
    total = sum(s[axis] for s in shapes)
    return Counts((*shapes[0][:axis], total, *shapes[0][axis + 1:]))


def _batch_norm(where: str, a: Attrs, shapes: list[Shape]) -> Counts:
    """A scale and a shift per channel (axis 0)."""
    affine = _flag(f"{where}.affine", a["affine"])
    return Counts(shapes[0], 2 * shapes[0][0] * affine)


def _layer_norm(where: str, a: Attrs, shapes: list[Shape]) -> Counts:
    """A scale and a shift per feature (the last axis)."""
    affine = _flag(f"{where}.affine", a["affine"])
    return Counts(shapes[0], 2 * shapes[0][-1] * affine)


def _softmax(where: str, a: Attrs, shapes: list[Shape]) -> Counts:
    _axis(f"{where}.axis", a["axis"], len(shapes[0]))
    return Counts(shapes[0])


def _reshape(where: str, a: Attrs, shapes: list[Shape]) -> Counts:
    target = a["shape"]
    if not isinstance(target, list | tuple) or not target or \
            sum(1 for v in target if v == -1) > 1:
        raise InputError(f"{where}.shape: must be a list of sizes with at most one -1, "
                         f"got {target!r}")
    known = [positive(f"{where}.shape", v) for v in target if v != -1]
    size = math.prod(shapes[0])
    if -1 in target:
        if size % math.prod(known):
            raise InputError(f"{where}.shape: {list(target)} does not fit {size} elements")
        target = [size // math.prod(known) if v == -1 else v for v in target]
    if math.prod(target) != size:
        raise InputError(f"{where}.shape: {list(target)} has {math.prod(target)} elements, "
                         f"the input {list(shapes[0])} has {size}")
    return Counts(tuple(target))


def _flatten(where: str, a: Attrs, shapes: list[Shape]) -> Counts:
    return Counts((math.prod(shapes[0]),))


def _transpose(where: str, a: Attrs, shapes: list[Shape]) -> Counts:
    perm = a["perm"]
    if not isinstance(perm, list | tuple) or sorted(perm) != list(range(len(shapes[0]))):
        raise InputError(f"{where}.perm: must order the axes 0..{len(shapes[0]) - 1}, "
                         f"got {perm!r}")
    return Counts(tuple(shapes[0][p] for p in perm))


def _slice(where: str, a: Attrs, shapes: list[Shape]) -> Counts:
    """Indices [start, stop) of one axis (BERT's pooler reads the first token)."""
    shape = shapes[0]
    axis = _axis(f"{where}.axis", a["axis"], len(shape))
    start = positive(f"{where}.start", a["start"], 0)
    stop = positive(f"{where}.stop", a["stop"])
    if not start < stop <= shape[axis]:
        raise InputError(f"{where}: [start, stop) = [{start}, {stop}) is not inside axis "
                         f"{axis} of size {shape[axis]}")
    return Counts((*shape[:axis], stop - start, *shape[axis + 1:]))


def _tensor_op(where: str, a: Attrs, shapes: list[Shape]) -> Counts:
    shape = a["shape"]
    if not isinstance(shape, list | tuple):
        raise InputError(f"{where}.shape: must be a list of sizes, got {shape!r}")
    return Counts(tuple(positive(f"{where}.shape", v) for v in shape),
                  positive(f"{where}.params", a["params"], 0))


def _embedding(where: str, a: Attrs, shapes: list[Shape]) -> Counts:
    """A table lookup: token ids (sequence,) -> (sequence, dim); no MACs."""
    _rank(where, shapes[0], (1,), "a sequence of ids")
    vocab = positive(f"{where}.vocab", a["vocab"])
    dim = positive(f"{where}.dim", a["dim"])
    return Counts((shapes[0][0], dim), vocab * dim)


ACTIVATIONS = ("relu", "relu6", "gelu", "sigmoid", "tanh", "silu", "hardswish", "clip")

for _spec in (
    OpSpec("conv", "convolution (groups, depthwise, rectangular kernels, strides, padding, "
           "dilation)", ("out_channels", "kernel"),
           {"stride": 1, "padding": 0, "dilation": 1, "groups": 1, "bias": False}, _conv,
           weighted=True),
    OpSpec("fc", "fully connected (gemm); flattens a feature map, acts on a token stream's "
           "last axis", ("out_features",), {"bias": False, "tied_to": ""}, _fc, weighted=True),
    OpSpec("matmul", "product of two activations (attention)", (), {"transpose_b": False},
           _matmul, arity=(2, 2)),
    OpSpec("pool", "max or average pooling", ("kernel",),
           {"mode": "max", "stride": None, "padding": 0, "ceil_mode": False}, _pool),
    OpSpec("global_pool", "global max or average pooling", (), {"mode": "avg"}, _global_pool),
    OpSpec("add", "elementwise sum (residual connections)", (), {}, _elementwise, arity=(2, None)),
    OpSpec("mul", "elementwise product", (), {}, _elementwise, arity=(2, None)),
    OpSpec("concat", "concatenation along an axis (channels by default)", (), {"axis": 0},
           _concat, arity=(1, None)),
    OpSpec("batch_norm", "batch normalisation (a scale and shift per channel)", (),
           {"affine": True}, _batch_norm),
    OpSpec("layer_norm", "layer normalisation over the last axis", (), {"affine": True},
           _layer_norm),
    OpSpec("act", f"elementwise activation ({', '.join(ACTIVATIONS)})", ("function",), {},
           _act),
    OpSpec("softmax", "softmax along an axis", (), {"axis": -1}, _softmax),
    OpSpec("reshape", "reshape (per sample; one size may be -1)", ("shape",), {}, _reshape),
    OpSpec("flatten", "flatten to one axis", (), {}, _flatten),
    OpSpec("transpose", "permute the axes", ("perm",), {}, _transpose),
    OpSpec("slice", "indices [start, stop) of one axis", ("start", "stop"), {"axis": 0},
           _slice),
    OpSpec("embedding", "table lookup of token ids", ("vocab", "dim"), {}, _embedding,
           weighted=True),
    OpSpec("lrn", "local response normalisation", (), {"size": 5}, _same),
    OpSpec("dropout", "dropout (the same shape)", (), {"ratio": 0.5}, _same),
    OpSpec("identity", "no-op", (), {}, _same),
    OpSpec("tensor_op", "another tensor operation, its output shape given by the importer "
           "(elementwise with a constant, reductions, slicing, padding, ...): no MACs; "
           "`params` counts a learned operand (a bias)", ("function", "shape"), {"params": 0},
           _tensor_op, arity=(1, None)),
):
    register_op(_spec)
