"""Operators of a graph network: their attributes, shape inference, parameters, and their
description (`workload.tdl`: loops and index expressions, Tofu's TDL), whence their MACs.

Every operator kind is one `OpSpec` in the registry `OPS` (name -> spec): the
YAML reader, the ONNX importer, the `networks` listing and the error
messages find operators there, and the planner and the cost model read the
description each node gets from its spec; an operator without a description
cannot be registered. Shapes are per sample (the batch is
applied by whoever uses the graph): (channels, rows, columns) for feature
maps, (sequence, features) for token streams, (heads, sequence, features) in
attention, (sequence,) for token ids.

Counting conventions (stated once, used everywhere):

- `params`: learnable values, biases and normalisation scales and shifts
  included (the totals published for ResNet, BERT and GPT-2 count them);
  weights shared with another node (`tied_to`) are counted once, at the
  node that owns them.
- `macs`: multiply-accumulates of the forward pass, from the description: the
  product of every loop's extent (and the kernel window's) of an operator with
  a multiply-accumulate body (a convolution, an fc layer, a product of two
  activations). Weightless operators (pooling, normalisation, activations,
  softmax, additions) have none; their element operations per output element
  are in their description too (`hardware.node_costs` turns both into time).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from hypar_sim.errors import InputError, clip_value
from hypar_sim.workload.dims import Dims
from hypar_sim.workload.tdl import Access, Description, Expr, Ix, Whole

Shape = tuple[int, ...]  # per sample
Attrs = Mapping[str, Any]

#: Largest size accepted for any dimension or attribute (keeps byte counts exact in floats).
MAX_SIZE = 2**24


def positive(where: str, value: Any, minimum: int = 1) -> int:
    """`value` as an integer in [minimum, MAX_SIZE], or a one-line InputError."""
    if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= MAX_SIZE:
        raise InputError(f"{where}: must be an integer from {minimum} to {MAX_SIZE}, "
                         f"got {clip_value(value)}")
    return value


#: Most elements of one tensor per sample (2^32: a 4-byte tensor of 16 GiB per sample; GPT-3's
#: largest activation per sample has 2^25), so that bytes times a batch stay exact integers.
MAX_ELEMENTS = 2**32


def check_elements(where: str, shape: Shape) -> None:
    """A one-line InputError if a per-sample tensor of `shape` is larger than MAX_ELEMENTS."""
    if math.prod(shape) > MAX_ELEMENTS:
        raise InputError(f"{where}: {list(shape)} has {math.prod(shape):,} elements per sample; "
                         f"at most {MAX_ELEMENTS:,} (2^32)")


#: Longest name of a network, node, layer or input (characters).
MAX_NAME = 200


def name(where: str, value: Any) -> str:
    """A name as text: a string or an integer of printable characters (no terminal escape
    sequences, no line breaks), at most MAX_NAME long; else a one-line InputError."""
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise InputError(f"{where}: must be a name (text), got {clip_value(value)}")
    text = str(value)
    if not text or not text.isprintable() or len(text) > MAX_NAME:
        raise InputError(f"{where}: must be 1 to {MAX_NAME} printable characters (no control "
                         f"or escape characters), got {clip_value(text)}")
    return text


def pair(where: str, value: Any, minimum: int = 1) -> tuple[int, int]:
    """An int or a [rows, cols] list as a pair."""
    if isinstance(value, list | tuple):
        if len(value) != 2:
            raise InputError(f"{where}: must be an integer or a [rows, columns] pair, "
                             f"got {clip_value(value)}")
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


def flag(where: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise InputError(f"{where}: must be true or false, got {clip_value(value)}")
    return value


def choice(where: str, value: Any, allowed: Sequence[str]) -> str:
    if value not in allowed:
        raise InputError(f"{where}: must be one of {', '.join(allowed)}, got {clip_value(value)}")
    return value


def window(size: int, kernel: int, stride: int, before: int, after: int, dilation: int = 1,
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
    """What a node is: its output shape and parameters (per sample)."""

    shape: Shape
    params: int = 0


#: describe(attrs, input shapes, output shape, input loop names) -> the node's description;
#: an InputError where the operator cannot be described (its message says why).
Describe = Callable[[Attrs, list[Shape], Shape, list[Dims]], Description]


@dataclass(frozen=True)
class OpSpec:
    """One operator kind: how many inputs it takes (`arity`: fewest, most or None for any
    number), its attributes (required, optional with defaults), its shape and parameters
    (`count`) and its description (`describe`: loops, index expressions, body)."""

    name: str
    summary: str
    required: tuple[str, ...]
    optional: Mapping[str, Any]
    count: Callable[[str, Attrs, list[Shape]], Counts]
    describe: Describe
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
    """Add an operator kind (a new name only, with its description)."""
    if spec.name in OPS:
        raise ValueError(f"operator {spec.name!r} is registered already")
    if not callable(spec.describe):
        raise ValueError(f"operator {spec.name!r} has no description (describe)")
    OPS[spec.name] = spec
    return spec


# --- rules the shipped operators' counts and descriptions share ------------------------

def check_rank(where: str, shape: Shape, ranks: Sequence[int], what: str) -> None:
    if len(shape) not in ranks:
        raise InputError(f"{where}: input of shape {list(shape)} is not {what}")


def check_axis(where: str, value: Any, rank: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not -rank <= value < rank:
        raise InputError(f"{where}: must be an axis from {-rank} to {rank - 1}, got {clip_value(value)}")
    return value % rank


def top_left(where: str, value: Any) -> tuple[int, int]:
    top, left, _, _ = pads(where, value)
    return top, left


def made(output: Dims) -> Access:
    return Access(tuple(Ix(d) for d in output))


def broadcast(where: str, shapes: list[Shape]) -> Shape:
    """numpy's broadcasting of per-sample shapes, or an InputError."""
    rank = max(len(s) for s in shapes)
    out = []
    for axis in range(rank):
        sizes = {s[axis - rank + len(s)] for s in shapes if axis - rank + len(s) >= 0} - {1}
        if len(sizes) > 1:
            raise InputError(f"{where}: shapes {[list(s) for s in shapes]} do not match")
        out.append(sizes.pop() if sizes else 1)
    return tuple(out)


def output_dims(where: str, shape: Shape, shapes: list[Shape], dims: list[Dims]) -> Dims:
    """The loops of an element-wise output: those of the first input of its shape."""
    for source, named in zip(shapes, dims, strict=True):
        if tuple(source) == tuple(shape):
            return named
    raise InputError(f"{where}no input has the output's shape {list(shape)} to name its axes "
                     f"(inputs {[list(s) for s in shapes]})")


def broadcast_read(output: Dims, shape: Shape, source: Shape, whole: int | None = None
                    ) -> Access:
    """An input broadcast to the output (numpy's rule, right-aligned): its axes of the
    output's size read the output's loop, its axes of size 1 the one index; axis `whole` of
    the output read whole (a normalised axis)."""
    skip = len(shape) - len(source)
    axes: list[Expr] = []
    for j, size in enumerate(source):
        axis = j + skip
        if axis == whole:
            axes.append(Whole(shape[axis]))
        elif size == shape[axis]:
            axes.append(Ix(output[axis]))
        else:
            axes.append(Whole(size))
    return Access(tuple(axes))


def elementwise_description(ops: Callable[[Attrs, list[Shape]], int], vectors: int = 0,
                             whole: Callable[[Attrs, Shape], int | None] = lambda a, s: None
                             ) -> Callable[..., Description]:
    """The description of an operator that computes each output element from the same
    elements of its inputs (broadcast ones included), `ops` operations per element, with
    axis `whole` read whole."""
    def describe(a: Attrs, shapes: list[Shape], shape: Shape, dims: list[Dims],
                 where: str = "") -> Description:
        output = output_dims(where, shape, shapes, dims)
        axis = whole(a, shape)
        reads = tuple(broadcast_read(output, shape, source, axis) for source in shapes)
        return Description(output, dict(zip(output, shape, strict=True)), reads,
                           made(output), vectors=vectors * int(a.get("affine", 0)),
                           ops_per_element=ops(a, shapes))
    return describe


def per_element(count: int) -> Callable[[Attrs, list[Shape]], int]:
    return lambda a, shapes: count


softmax_axis = lambda a, shape: a["axis"] % len(shape)  # noqa: E731 - a one-line rule


last_axis = lambda a, shape: len(shape) - 1  # noqa: E731


def unregister_op(name: str) -> None:
    """Remove an operator kind (tests that register their own clean up with this)."""
    OPS.pop(name, None)


# The shipped operators register themselves (after the framework above is defined).
from hypar_sim.workload import operators as _operators  # noqa: E402,F401,I001
from hypar_sim.workload import elementwise_ops as _elementwise  # noqa: E402,F401
