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

import math
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


def sample_shape(im: Any, name: str) -> list[int]:
    """Tensor `name`'s per-sample shape."""
    return list(im.sample(name).shape)


def tensor_op(im: Any, call: Call, follows: list[int | None] | None = None) -> None:
    """A `tensor_op` node: shape from ONNX, output axes following the first activation's
    (`follows`; default numpy's broadcasting), the learned constants it reads counted."""
    attrs: dict[str, Any] = {"function": call.node.op_type,
                             "shape": sample_shape(im, call.out),
                             "params": im.learned_params(call.consts)}
    if follows is not None:
        attrs["from_axes"] = follows
    im.emit(call.out, "tensor_op", call.acts, **attrs)


def same_axes(im: Any, call: Call) -> list[int | None]:
    """Every output axis follows the same axis of the first activation (same rank)."""
    rank = len(sample_shape(im, call.out))
    if len(sample_shape(im, call.acts[0])) != rank:
        raise im.refuse(call.node, "its output and input ranks differ per sample")
    return list(range(rank))


# --- weighted operators ---------------------------------------------------------------

@maps("Conv")
def _conv(im: Any, call: Call) -> None:
    node, attrs = call.node, call.attrs
    if node.input[1] not in im.weights or node.input[1] in im.active:
        raise im.refuse(node, "its weights are computed from activations; not supported")
    kernels, _, *window = im.weights[node.input[1]]
    if len(window) not in (1, 2):
        raise im.refuse(node, f"only 1-D and 2-D convolutions are supported, got a "
                        f"{len(window)}-D kernel")
    im.claim(call.out, node.input[1])
    bias = len(node.input) > 2 and bool(node.input[2])
    if bias:
        im.claim(call.out, node.input[2])
    if len(window) == 2:
        im.emit(call.out, "conv", call.acts[:1], out_channels=kernels, kernel=list(window),
                stride=list(attrs.get("strides", [1, 1])), padding=_pads(im, call),
                dilation=list(attrs.get("dilations", [1, 1])),
                groups=int(attrs.get("group", 1)), bias=bias)
        return
    # a 1-D convolution (audio: Whisper, wav2vec 2.0) is a 2-D one over one row
    channels, length = sample_shape(im, call.acts[0])
    before, after = (list(attrs.get("pads", [0, 0])) + [0, 0])[:2]
    if attrs.get("auto_pad", b"NOTSET") not in (b"NOTSET", "NOTSET", b"VALID", "VALID"):
        raise im.refuse(node, "a 1-D convolution with auto_pad SAME is not supported")
    im.emit(f"{call.out}/rows", "reshape", call.acts[:1], shape=[channels, 1, length])
    im.emit(f"{call.out}/conv2d", "conv", [f"{call.out}/rows"], out_channels=kernels,
            kernel=[1, window[0]], stride=[1, int(attrs.get("strides", [1])[0])],
            padding=[0, int(before), 0, int(after)],
            dilation=[1, int(attrs.get("dilations", [1])[0])],
            groups=int(attrs.get("group", 1)), bias=bias)
    im.emit(call.out, "reshape", [f"{call.out}/conv2d"], shape=sample_shape(im, call.out))


@maps("Gemm")
def _gemm(im: Any, call: Call) -> None:
    node, attrs = call.node, call.attrs
    if len(call.acts) != 1 or call.acts[0] != node.input[0] or attrs.get("transA"):
        raise im.refuse(node, "a Gemm is read as x W (+ b) with x the activation")
    rows, cols = im.weights[node.input[1]]
    bias = len(node.input) > 2 and bool(node.input[2])
    inner, features = (cols, rows) if attrs.get("transB") else (rows, cols)
    _fc(im, call, node.input[1], features, bias, inner)
    if bias:
        im.claim(call.out, node.input[2])


def _fc(im: Any, call: Call, weight: str, features: int, bias: bool, inner: int) -> None:
    """x W as an fc node of `features` outputs; W's `inner` size must be x's last axis (a
    channels-last linear) or its whole sample (flattened)."""
    shape = sample_shape(im, call.acts[0])
    if inner not in (shape[-1] if shape else 1, math.prod(shape)):
        raise im.refuse(call.node, f"its weight {weight} has {inner} rows, but its input "
                        f"{call.acts[0]} has {list(shape)} values per sample")
    tied = im.claim(call.out, weight)
    attrs: dict[str, Any] = {"out_features": features, "bias": bias}
    if len(shape) == 3:
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
        inner, features = im.weights[node.input[1]]
        _fc(im, call, node.input[1], features, False, inner)
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
    rank = len(sample_shape(im, node.input[0]))
    indices = len(sample_shape(im, call.out)) - rank + 1  # the indices' axes, per sample
    follows = [*range(axis), *[None] * indices, *range(axis + 1, rank)]
    tensor_op(im, call, follows)


@maps("Einsum")
def _einsum(im: Any, call: Call) -> None:
    """An Einsum that is a (batched) matrix product: of two activations, a matmul; of an
    activation by a 2-D weight, an fc layer (MaxViT's attention, some linears)."""
    node = call.node
    equation = call.attrs["equation"]
    equation = (equation.decode() if isinstance(equation, bytes) else equation).replace(" ", "")
    terms, _, out = equation.partition("->")
    inputs = terms.split(",")
    if len(inputs) != 2 or not out:
        raise im.refuse(node, f"Einsum '{equation}' is not a product of two tensors")
    a, b = inputs
    summed = [c for c in a if c in b and c not in out]
    weight = len(call.acts) == 1 and call.acts[0] == node.input[0] and len(b) == 2
    if len(summed) == 1 and weight and a[-1] == summed[0] and out == a[:-1] + \
            b.replace(summed[0], ""):
        rows, cols = im.weights[node.input[1]]
        inner, features = (rows, cols) if b[0] == summed[0] else (cols, rows)
        _fc(im, call, node.input[1], features, False, inner)
        return
    k = summed[0] if len(summed) == 1 else ""
    if len(call.acts) == 2 and k and a[-1] == k and a[:-2] == b[:-2] and \
            k in b[-2:] and out == a[:-1] + b[-2:].replace(k, ""):
        im.emit(call.out, "matmul", call.acts, transpose_b=b[-1] == k)
        return
    raise im.refuse(node, f"Einsum '{equation}' is not a (batched) matrix product "
                    "(..., i, k) x (..., k, j) -> (..., i, j)")


# --- normalisations, activations, elementwise -------------------------------------------

@maps("BatchNormalization")
def _batch_norm(im: Any, call: Call) -> None:
    im.learned_params(call.consts)
    im.emit(call.out, "batch_norm", call.acts[:1])


@maps("LayerNormalization")
def _layer_norm(im: Any, call: Call) -> None:
    if im.axis(call.node, call.acts[0], call.attrs.get("axis", -1)) != \
            len(sample_shape(im, call.acts[0])) - 1:
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


@maps("Identity", "Dropout", "LRN")
def _pass(im: Any, call: Call) -> None:
    im.emit(call.out, call.node.op_type.lower(), call.acts[:1])


@maps("Softmax", "LogSoftmax")
def _softmax(im: Any, call: Call) -> None:
    im.emit(call.out, "softmax", call.acts,
            axis=im.axis(call.node, call.acts[0], call.attrs.get("axis", -1)))


@maps("Add", "Mul")
def _sum_product(im: Any, call: Call) -> None:
    out = sample_shape(im, call.out)
    if len(call.acts) >= 2 and not call.consts and \
            any(sample_shape(im, a) == out for a in call.acts):
        im.emit(call.out, call.node.op_type.lower(), call.acts)
    else:
        tensor_op(im, call, broadcast_axes(im, call))


@maps("InstanceNormalization", "GroupNormalization", "MeanVarianceNormalization",
      "RMSNormalization", "LpNormalization",
      "Sub", "Div", "Pow", "Where", "Min", "Max", "Mean", "Sum", "PRelu", "Equal", "Less",
      "Greater", "And", "Or", "Not", "Erf", "Sqrt", "Exp", "Log", "Neg", "Abs", "Reciprocal",
      "Cast", "CastLike", "LeakyRelu", "Elu", "Selu", "Softplus", "Softsign", "HardSigmoid",
      "Clip", "Floor", "Ceil", "Sin", "Cos", "IsNaN", "IsInf", "Trilu", "CumSum")
def _elementwise(im: Any, call: Call) -> None:
    tensor_op(im, call, broadcast_axes(im, call))


def broadcast_axes(im: Any, call: Call) -> list[int | None] | None:
    """An elementwise output's axes: the first activation's, right-aligned (numpy)."""
    out, first = sample_shape(im, call.out), sample_shape(im, call.acts[0])
    skip = len(out) - len(first)
    if skip < 0:
        raise im.refuse(call.node, "its activation has more axes than its output per sample")
    return [j - skip if j >= skip else None for j in range(len(out))]


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
    _, rows, cols = sample_shape(im, call.acts[0])
    kernel = attrs.get("kernel_shape") or im.weights[node.input[1]][2:]
    strides = attrs.get("strides", [1, 1])
    dilations = attrs.get("dilations", [1, 1])
    total = [max(0, (-(-size // s) - 1) * s + (k - 1) * d + 1 - size)
             for size, k, s, d in zip((rows, cols), kernel, strides, dilations, strict=True)]
    small = [t // 2 for t in total]
    big = [t - t // 2 for t in total]
    before, after = (small, big) if auto == "SAME_UPPER" else (big, small)
    return [before[0], before[1], after[0], after[1]]


# The mappers of operators that move elements register themselves (after the framework).
from hypar_sim.workload import onnx_moves as _moves  # noqa: E402,F401,I001
