"""ONNX operators as graph operators, per sample: one mapping function per ONNX operator
type, found in `MAPPERS` (a new type is one `@maps(...)` function here).

Every function gets the importer (`onnx_import.Importer`: the per-sample view of every
tensor, its constants, the nodes emitted so far) and the node (`Call`: its active and
constant inputs, attributes, output), and emits one or more graph nodes named after the
node's outputs. Axes in attributes are translated to per-sample axes; an operator along
the batch axis is refused. What the YAML operators cannot express exactly (a reduction, a
gather, padding) becomes a `tensor_op`: its output shape, the input axis each output axis
follows (`from_axes`), no MACs, and the learned values it reads.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hypar_sim.errors import InputError
from hypar_sim.workload.onnx_fold import attributes


@dataclass
class Call:
    """One ONNX node being mapped: its activations and constants, attributes, output."""

    node: Any
    acts: list[str]
    consts: list[str]
    attrs: dict[str, Any]

    @property
    def out(self) -> str:
        return self.node.output[0]


Mapper = Callable[[Any, Call], None]
MAPPERS: dict[str, Mapper] = {}


def maps(*op_types: str) -> Callable[[Mapper], Mapper]:
    """Register a mapping function for ONNX operator types `op_types`."""
    def register(function: Mapper) -> Mapper:
        for op in op_types:
            MAPPERS[op] = function
        return function
    return register


#: Nodes on constants only are folded whatever their type; these are never mapped.
_FOLDED = ("Shape", "Size", "Constant", "ConstantOfShape", "Range", "EyeLike",
           "RandomNormalLike", "RandomUniformLike")


def supported() -> list[str]:
    return sorted({*MAPPERS, *_FOLDED})


def check_graph(path: Path, model: Any) -> None:
    """Only the standard operator set is read (a custom domain's node is an error), and
    every node reads tensors defined before it (ONNX's rule): a tensor nothing defines, or
    one a later node computes (a cycle), is an error naming both."""
    graph = model.graph
    defined = {t.name for t in (*graph.input, *graph.initializer)} | {""}
    later = {out: node for node in graph.node for out in node.output}
    for node in graph.node:
        name = node.name or node.output[0]
        if node.domain not in ("", "ai.onnx"):
            raise InputError(f"{path}: node {name}: unsupported operator {node.domain}."
                             f"{node.op_type}; supported: the standard operators "
                             f"{', '.join(supported())}")
        for tensor in node.input:
            if tensor in defined:
                continue
            if tensor in later:
                maker = later[tensor]
                raise InputError(f"{path}: node {name} ({node.op_type}) reads {tensor}, "
                                 f"which node {maker.name or tensor} ({maker.op_type}) computes "
                                 "after it: the graph has a cycle or is not in topological "
                                 "order")
            raise InputError(f"{path}: node {name} ({node.op_type}) reads {tensor}, which is "
                             "neither a graph input, an initializer nor any node's output")
        defined.update(node.output)


def map_node(im: Any, node: Any) -> None:
    """Emit the graph nodes of ONNX node `node` (which reads an activation)."""
    mapper = MAPPERS.get(node.op_type)
    if mapper is None:
        raise im.refuse(node, f"unsupported operator; supported: {', '.join(supported())}")
    call = Call(node, [i for i in node.input if i in im.active],
                [i for i in node.input if i and i not in im.active], attributes(node))
    mapper(im, call)


def _shape(im: Any, name: str) -> list[int]:
    return list(im.sample(name).shape)


def tensor_op(im: Any, call: Call, follows: list[int | None] | None = None,
              out: str | None = None) -> None:
    """A `tensor_op` node: shape from ONNX, output axes following the first activation's
    (`follows`; default numpy's broadcasting), the learned constants it reads counted."""
    out = out or call.out
    attrs: dict[str, Any] = {"function": call.node.op_type, "shape": _shape(im, out),
                             "params": im.learned_params(call.consts)}
    if follows is not None:
        attrs["from_axes"] = follows
    im.emit(out, "tensor_op", call.acts, **attrs)


def _same_axes(im: Any, call: Call) -> list[int | None]:
    """Every output axis follows the same axis of the first activation (same rank)."""
    rank = len(_shape(im, call.out))
    if len(_shape(im, call.acts[0])) != rank:
        raise im.refuse(call.node, "its output and input ranks differ per sample")
    return list(range(rank))


# --- weighted operators ---------------------------------------------------------------

@maps("Conv")
def _conv(im: Any, call: Call) -> None:
    node, attrs = call.node, call.attrs
    if node.input[1] not in im.weights or node.input[1] in im.active:
        raise im.refuse(node, "its weights are computed from activations; not supported")
    kernels, _, *window = im.weights[node.input[1]]
    if len(window) != 2:
        raise im.refuse(node, f"only 2-D convolutions are supported, got a {len(window)}-D "
                        "kernel")
    im.claim(call.out, node.input[1])
    im.emit(call.out, "conv", call.acts[:1], out_channels=kernels, kernel=list(window),
            stride=list(attrs.get("strides", [1, 1])), padding=_pads(im, call),
            dilation=list(attrs.get("dilations", [1, 1])), groups=int(attrs.get("group", 1)),
            bias=len(node.input) > 2 and bool(node.input[2]))
    if len(node.input) > 2 and node.input[2]:
        im.claim(call.out, node.input[2])


@maps("Gemm")
def _gemm(im: Any, call: Call) -> None:
    node, attrs = call.node, call.attrs
    if len(call.acts) != 1 or call.acts[0] != node.input[0] or attrs.get("transA"):
        raise im.refuse(node, "a Gemm is read as x W (+ b) with x the activation")
    rows, cols = im.weights[node.input[1]]
    bias = len(node.input) > 2 and bool(node.input[2])
    _fc(im, call, node.input[1], rows if attrs.get("transB") else cols, bias)
    if bias:
        im.claim(call.out, node.input[2])


def _fc(im: Any, call: Call, weight: str, features: int, bias: bool) -> None:
    tied = im.claim(call.out, weight)
    attrs: dict[str, Any] = {"out_features": features, "bias": bias}
    if len(_shape(im, call.acts[0])) == 3:
        attrs["flatten"] = False  # a MatMul acts on the last axis (a channels-last linear)
    if tied:
        attrs["tied_to"] = tied
    im.emit(call.out, "fc", call.acts[:1], **attrs)


@maps("MatMul")
def _matmul(im: Any, call: Call) -> None:
    node = call.node
    if len(call.acts) == 2:
        im.emit(call.out, "matmul", call.acts)
    elif call.acts == [node.input[0]] and len(im.weights.get(node.input[1], ())) == 2:
        _fc(im, call, node.input[1], im.weights[node.input[1]][1], False)
    else:
        raise im.refuse(node, "a MatMul is read as a product of two activations, or of an "
                        "activation by a 2-D weight")


@maps("Gather")
def _gather(im: Any, call: Call) -> None:
    node = call.node
    table = im.weights.get(node.input[0])
    if call.acts == [node.input[1]] and table is not None and len(table) == 2:
        vocab, dim = table
        tied = im.claim(call.out, node.input[0])
        if tied:
            raise im.refuse(node, f"its table is {tied}'s weights; an embedding must own them")
        im.emit(call.out, "embedding", call.acts, vocab=vocab, dim=dim)
        return
    if call.acts != [node.input[0]]:
        raise im.refuse(node, "a Gather is read as an embedding (a 2-D table, active ids) or "
                        "as indexing an activation by constant indices")
    axis = im.axis(node, node.input[0], call.attrs.get("axis", 0))
    rank = len(_shape(im, node.input[0]))
    indices = len(_shape(im, call.out)) - rank + 1  # the indices' axes, per sample
    follows = [*range(axis), *[None] * indices, *range(axis + 1, rank)]
    tensor_op(im, call, follows)


# --- normalisations, activations, elementwise -------------------------------------------

@maps("BatchNormalization")
def _batch_norm(im: Any, call: Call) -> None:
    im.learned_params(call.consts)
    im.emit(call.out, "batch_norm", call.acts[:1])


@maps("LayerNormalization")
def _layer_norm(im: Any, call: Call) -> None:
    if im.axis(call.node, call.acts[0], call.attrs.get("axis", -1)) != \
            len(_shape(im, call.acts[0])) - 1:
        tensor_op(im, call)
        return
    im.learned_params(call.consts)
    im.emit(call.out, "layer_norm", call.acts[:1],
            affine=len(call.node.input) > 1)


_UNARY = {"Relu": "relu", "Sigmoid": "sigmoid", "Tanh": "tanh", "HardSwish": "hardswish",
          "Gelu": "gelu"}


@maps(*_UNARY)
def _activation(im: Any, call: Call) -> None:
    im.emit(call.out, "act", call.acts, function=_UNARY[call.node.op_type])


@maps("Identity", "Dropout")
def _pass(im: Any, call: Call) -> None:
    im.emit(call.out, call.node.op_type.lower(), call.acts[:1])


@maps("LRN")
def _lrn(im: Any, call: Call) -> None:
    im.emit(call.out, "lrn", call.acts[:1])


@maps("Softmax", "LogSoftmax")
def _softmax(im: Any, call: Call) -> None:
    im.emit(call.out, "softmax", call.acts,
            axis=im.axis(call.node, call.acts[0], call.attrs.get("axis", -1)))


@maps("Add", "Mul")
def _sum_product(im: Any, call: Call) -> None:
    out = _shape(im, call.out)
    if len(call.acts) >= 2 and not call.consts and \
            any(_shape(im, a) == out for a in call.acts):
        im.emit(call.out, call.node.op_type.lower(), call.acts)
    else:
        tensor_op(im, call, _broadcast_axes(im, call))


@maps("Sub", "Div", "Pow", "Where", "Min", "Max", "Mean", "Sum", "PRelu", "Equal", "Less",
      "Greater", "And", "Or", "Not", "Erf", "Sqrt", "Exp", "Log", "Neg", "Abs", "Reciprocal",
      "Cast", "CastLike", "LeakyRelu", "Elu", "Selu", "Softplus", "Softsign", "HardSigmoid",
      "Clip", "Floor", "Ceil", "Sin", "Cos", "IsNaN", "IsInf", "Trilu", "CumSum")
def _elementwise(im: Any, call: Call) -> None:
    tensor_op(im, call, _broadcast_axes(im, call))


def _broadcast_axes(im: Any, call: Call) -> list[int | None] | None:
    """An elementwise output's axes: the first activation's, right-aligned (numpy)."""
    out, first = _shape(im, call.out), _shape(im, call.acts[0])
    skip = len(out) - len(first)
    if skip < 0:
        raise im.refuse(call.node, "its activation has more axes than its output per sample")
    return [j - skip if j >= skip else None for j in range(len(out))]


# --- moving elements ----------------------------------------------------------------------

@maps("Reshape", "Flatten", "Squeeze", "Unsqueeze")
def _reshape(im: Any, call: Call) -> None:
    shape = _shape(im, call.out)
    if call.node.op_type == "Flatten" and len(shape) == 1:
        im.emit(call.out, "flatten", call.acts[:1])
    else:
        im.emit(call.out, "reshape", call.acts[:1], shape=shape)


@maps("Transpose")
def _transpose(im: Any, call: Call) -> None:
    """The permutation of the per-sample axes; one that only moves axes of size 1 (or the
    batch) is a reshape."""
    source = im.sample(call.acts[0])
    rank = len(source.shape) + (1 if source.dropped else 0)
    perm = [int(p) for p in call.attrs.get("perm", list(reversed(range(rank))))]
    order = [source.sample_axis(p) for p in perm]
    order = [p for p in order if p is not None]
    moved = [p for p in order if source.shape[p] > 1]
    if moved == sorted(moved):
        im.emit(call.out, "reshape", call.acts, shape=_shape(im, call.out))
    elif [source.shape[p] for p in order] == _shape(im, call.out):
        im.emit(call.out, "transpose", call.acts, perm=order)
    else:  # the batch fixed at 1 leaves an axis of size 1 where the export moved it
        im.emit(f"{call.out}/transpose", "transpose", call.acts, perm=order)
        im.emit(call.out, "reshape", [f"{call.out}/transpose"], shape=_shape(im, call.out))


@maps("Concat")
def _concat(im: Any, call: Call) -> None:
    axis = im.axis(call.node, call.acts[0], call.attrs["axis"])
    if call.consts:
        tensor_op(im, call, _same_axes(im, call))
    else:
        im.emit(call.out, "concat", call.acts, axis=axis)


@maps("Split")
def _split(im: Any, call: Call) -> None:
    axis = im.axis(call.node, call.acts[0], call.attrs.get("axis", 0))
    start = 0
    for part in call.node.output:
        size = _shape(im, part)[axis]
        im.emit(part, "slice", call.acts, axis=axis, start=start, stop=start + size)
        start += size


@maps("Slice")
def _slice(im: Any, call: Call) -> None:
    """One axis by constant bounds with step 1: a `slice` node (ShuffleNet's channel
    split); anything else a tensor_op."""
    node = call.node
    before, after = _shape(im, node.input[0]), _shape(im, call.out)
    bounds = [im.values.get(name) for name in node.input[1:] if name]
    changed = [a for a, (x, y) in enumerate(zip(before, after, strict=True)) if x != y]
    if call.acts != [node.input[0]] or any(b is None for b in bounds) or len(changed) != 1 \
            or any(int(step) != 1 for step in (bounds[3] if len(bounds) > 3 else [1])):
        tensor_op(im, call, _same_axes(im, call))
        return
    source = im.sample(node.input[0])
    axes = [int(a) for a in bounds[2]] if len(bounds) > 2 else list(range(len(bounds[0])))
    onnx_axes = [source.sample_axis(a) for a in axes]
    axis = changed[0]
    start = int(bounds[0][onnx_axes.index(axis)]) if axis in onnx_axes else 0
    start = min(max(start + before[axis] if start < 0 else start, 0), before[axis])
    im.emit(call.out, "slice", call.acts, axis=axis, start=start, stop=start + after[axis])


@maps("Pad", "Tile", "Resize", "Upsample", "GatherElements", "ScatterND", "ScatterElements")
def _same_rank(im: Any, call: Call) -> None:
    tensor_op(im, call, _same_axes(im, call))


@maps("Expand")
def _expand(im: Any, call: Call) -> None:
    tensor_op(im, call, _broadcast_axes(im, call))


@maps("ReduceMean", "ReduceMax", "ReduceMin", "ReduceSum", "ReduceL2", "ReduceProd",
      "ReduceSumSquare", "ArgMax", "ArgMin")
def _reduce(im: Any, call: Call) -> None:
    """Over a feature map's rows and columns: a global pool; otherwise a tensor_op whose
    reduced axes are read whole."""
    node, attrs = call.node, call.attrs
    source = _shape(im, node.input[0])
    axes = attrs.get("axes", [attrs["axis"]] if "axis" in attrs else None)
    if axes is None and len(node.input) > 1 and node.input[1] in im.values:
        axes = [int(a) for a in im.values[node.input[1]]]
    axes = list(range(len(source))) if axes is None else \
        sorted(im.axis(node, node.input[0], a) for a in axes)
    keep = attrs.get("keepdims", 1)
    if len(source) == 3 and axes == [1, 2] and node.op_type in ("ReduceMean", "ReduceMax"):
        mode = "avg" if node.op_type == "ReduceMean" else "max"
        if keep:
            im.emit(call.out, "global_pool", call.acts, mode=mode)
        else:
            im.emit(f"{call.out}/pool", "global_pool", call.acts, mode=mode)
            im.emit(call.out, "flatten", [f"{call.out}/pool"])
        return
    follows = list(range(len(source))) if keep else \
        [a for a in range(len(source)) if a not in axes]
    tensor_op(im, call, follows)


# --- pooling ---------------------------------------------------------------------------

@maps("MaxPool", "AveragePool")
def _pool(im: Any, call: Call) -> None:
    attrs = call.attrs
    im.emit(call.out, "pool", call.acts[:1],
            mode="max" if call.node.op_type == "MaxPool" else "avg",
            kernel=list(attrs["kernel_shape"]), stride=list(attrs.get("strides", [1, 1])),
            padding=_pads(im, call), ceil_mode=bool(attrs.get("ceil_mode", 0)))


@maps("GlobalAveragePool", "GlobalMaxPool")
def _global_pool(im: Any, call: Call) -> None:
    im.emit(call.out, "global_pool", call.acts,
            mode="avg" if "Average" in call.node.op_type else "max")


def _pads(im: Any, call: Call) -> list[int]:
    """[top, left, bottom, right]; SAME_UPPER/SAME_LOWER from the output size."""
    node, attrs = call.node, call.attrs
    auto = attrs.get("auto_pad", b"NOTSET")
    auto = auto.decode() if isinstance(auto, bytes) else auto
    if auto not in ("SAME_UPPER", "SAME_LOWER"):
        top, left, bottom, right = (list(attrs.get("pads", [0, 0, 0, 0])) + [0] * 4)[:4]
        return [top, left, bottom, right]
    _, rows, cols = _shape(im, call.acts[0])
    kernel = attrs.get("kernel_shape") or im.weights[node.input[1]][2:]
    strides = attrs.get("strides", [1, 1])
    dilations = attrs.get("dilations", [1, 1])
    total = [max(0, (-(-size // s) - 1) * s + (k - 1) * d + 1 - size)
             for size, k, s, d in zip((rows, cols), kernel, strides, dilations, strict=True)]
    small = [t // 2 for t in total]
    big = [t - t // 2 for t in total]
    before, after = (small, big) if auto == "SAME_UPPER" else (big, small)
    return [before[0], before[1], after[0], after[1]]
