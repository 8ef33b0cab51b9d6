"""ONNX import: a model file becomes a `Graph` (the same operators as the YAML graphs).

Steps: load with the `onnx` package; fix the batch dimension to 1 and a dynamic
sequence dimension to `seq` (any other dynamic dimension is an error); run
ONNX's shape inference with data propagation (so Reshape targets computed by
Shape/Gather/Concat arithmetic are known); then map every node that reads an
activation (a tensor that depends on a graph input) to an operator of
`ops`. Nodes that only compute on constants or shapes (Shape, Gather,
Unsqueeze and Concat on shapes, Constant, ConstantOfShape, Range, ...) are
folded away. Initializers listed among the graph inputs (old exporters) are
weights, not inputs. Each node is named after its output tensor; per-sample
shapes are ONNX's shapes without the batch axis, and every shape our
operators infer is checked against ONNX's.

Parameters are counted from the weights the operators read (a convolution's
kernel and bias, a Gemm's or MatMul's matrix, a normalisation's scale and
shift, an embedding table); a learned tensor of more than one element that an
elementwise operator adds or multiplies (a bias after a MatMul) counts as
parameters of that `tensor_op` node. Scalars (a 1/sqrt(d) scale) do not.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from hypar_sim.errors import InputError
from hypar_sim.workload.graph import Graph, parse_graph
from hypar_sim.workload.onnx_fold import attributes, static_shapes

#: Default length of a dynamic sequence dimension (tokens).
DEFAULT_SEQ = 128

_UNARY = {"Relu": "relu", "Sigmoid": "sigmoid", "Tanh": "tanh", "HardSwish": "hardswish",
          "Gelu": "gelu"}
_TENSOR_OPS = {
    "Erf", "Sqrt", "Exp", "Log", "Neg", "Abs", "Reciprocal", "Cast", "LeakyRelu", "Elu",
    "Selu", "Softplus", "Softsign", "HardSigmoid", "PRelu", "Pow", "Clip", "Not", "Where",
    "Equal", "Less", "Greater", "ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin",
    "ReduceL2", "Slice", "Gather", "Pad", "Resize", "Upsample", "Tile", "Expand", "Min",
    "Max", "Sub", "Div", "Add", "Mul", "Mean", "Sum", "CumSum", "Trilu", "ScatterND",
}
_RESHAPES = {"Reshape", "Flatten", "Squeeze", "Unsqueeze"}
_PASS = {"Identity": "identity", "Dropout": "dropout", "LRN": "lrn"}
_FOLDED_ALWAYS = {"Shape", "Size", "Constant", "ConstantOfShape", "Range", "EyeLike",
                  "RandomNormalLike", "RandomUniformLike"}
SUPPORTED = sorted({"Conv", "Gemm", "MatMul", "MaxPool", "AveragePool", "GlobalAveragePool",
                    "GlobalMaxPool", "BatchNormalization", "LayerNormalization", "Softmax",
                    "LogSoftmax", "Concat", "Transpose", "Split", *_UNARY, *_TENSOR_OPS,
                    *_RESHAPES, *_PASS, *_FOLDED_ALWAYS})


def load_onnx(path: Path, seq: int | None = None) -> Graph:
    """The graph of the ONNX model at `path` (per-sample shapes; sequence `seq`)."""
    import onnx  # a heavy import, only when a model is read

    from hypar_sim.workload.onnx_fold import fold_and_infer, skeleton, small_external_values

    try:
        model = onnx.load(str(path), load_external_data=False)  # shapes only: no weights read
    except Exception as exc:  # the package raises protobuf's DecodeError and others
        raise InputError(f"{path}: not an ONNX model, or a truncated one "
                         f"({type(exc).__name__})") from None
    if not model.graph.node:
        raise InputError(f"{path}: not an ONNX model, or a truncated one (no graph nodes)")
    for node in model.graph.node:
        if node.domain not in ("", "ai.onnx"):
            raise InputError(f"{path}: node {node.name or node.output[0]}: unsupported "
                             f"operator {node.domain}.{node.op_type}; supported: the standard "
                             f"operators {', '.join(SUPPORTED)}")
    initializers = {t.name: t for t in model.graph.initializer}
    inputs = [i for i in model.graph.input if i.name not in initializers]
    _fix_dims(path, inputs, seq)
    weights = {name: tuple(t.dims) for name, t in initializers.items()}
    skeleton(model)
    missing = small_external_values(model, path.parent)
    absent = (f" (the values of {', '.join(missing[:3])} are in an external data file that "
              "is not there)") if missing else ""
    try:
        model, small = fold_and_infer(model)
    except Exception as exc:
        raise InputError(f"{path}: ONNX shape inference failed: "
                         f"{str(exc).splitlines()[0][:200]}{absent}") from None
    return _Importer(path, model, weights, small, absent).graph(inputs)


def _fix_dims(path: Path, inputs: list, seq: int | None) -> None:
    """Batch (axis 0) to 1; a dynamic axis 1 of a token input (rank 2 or 3) to the sequence."""
    for tensor in inputs:
        dims = tensor.type.tensor_type.shape.dim
        for axis, dim in enumerate(dims):
            if axis == 0:
                dim.dim_value = 1
            elif not dim.HasField("dim_value"):
                if axis == 1 and len(dims) in (2, 3):
                    dim.dim_value = seq if seq is not None else DEFAULT_SEQ
                else:
                    raise InputError(
                        f"{path}: input {tensor.name} has a dynamic axis {axis} "
                        f"('{dim.dim_param or '?'}'); only the batch (axis 0) and a sequence "
                        "(axis 1 of a token input) may be dynamic")
            elif seq is not None and axis == 1 and len(dims) in (2, 3) and \
                    tensor.type.tensor_type.elem_type in (6, 7):  # int32, int64 token ids
                dim.dim_value = seq


class _Importer:
    """Maps the nodes of one inferred model to graph nodes."""

    def __init__(self, path: Path, model: Any, weights: dict[str, tuple[int, ...]],
                 values: dict[str, Any], absent: str = "") -> None:
        self.path, self.model, self.absent = path, model, absent
        self.weights = dict(weights)  # every stored tensor's shape
        self.values = dict(values)  # small constants: shapes, axes, scalars
        self.shapes = static_shapes(model)  # every tensor whose shape inference knows
        self.active: set[str] = set()
        self.nodes: list[dict[str, Any]] = []

    def graph(self, inputs: list) -> Graph:
        graph_inputs = {}
        for tensor in inputs:
            shape = self._sample_shape(tensor.name)
            graph_inputs[tensor.name] = list(shape)
            self.active.add(tensor.name)
        for node in self.model.graph.node:
            if node.op_type in _FOLDED_ALWAYS or not any(i in self.active for i in node.input):
                self._constant(node)
            else:
                self._map(node)
        outputs = [o.name for o in self.model.graph.output if o.name in self.active]
        name = self.model.graph.name or self.path.stem
        data = {"name": self.path.stem, "description": f"imported from ONNX graph '{name}'",
                "source": str(self.path), "inputs": graph_inputs, "nodes": self.nodes,
                "outputs": outputs}
        graph = parse_graph(data, str(self.path), default_name=self.path.stem)
        for node in graph.nodes:
            if node.name not in self.shapes:
                continue  # a node the import added (a global pool's flatten)
            expected = self._sample_shape(node.name)
            if node.shape != expected:
                raise InputError(f"{self.path}: node {node.name} ({node.op}): shape "
                                 f"{list(node.shape)} here, ONNX infers {list(expected)}")
        return graph

    def _constant(self, node: Any) -> None:
        """A node on constants or shapes only: folded (the shapes of its outputs kept for
        the nodes that read them; its small values are the folding's)."""
        for out in node.output:
            if out in self.shapes:
                self.weights[out] = self.shapes[out]

    def _sample_shape(self, name: str) -> tuple[int, ...]:
        shape = self.shapes.get(name)
        if shape is None:
            raise InputError(f"{self.path}: tensor {name}: ONNX shape inference gives no "
                             f"static shape{self.absent}")
        if not shape or shape[0] != 1:
            raise InputError(f"{self.path}: tensor {name} of shape {list(shape)} does not keep "
                             "the batch on axis 0; such models are not supported")
        return shape[1:]

    def _emit(self, name: str, op: str, inputs: list[str], **attrs: Any) -> None:
        self.nodes.append({"name": name, "type": op, "inputs": inputs, **attrs})
        self.active.add(name)

    def _map(self, node: Any) -> None:
        op, out = node.op_type, node.output[0]
        acts = [i for i in node.input if i in self.active]
        const = [i for i in node.input if i and i not in self.active]
        attrs = attributes(node)
        shape = list(self._sample_shape(out)) if op != "Split" else []
        if op == "Slice" and self._slice(node, out, acts, shape):
            return  # one axis by constant bounds: a slice node
        if op in ("ReduceMean", "ReduceMax") and self._global_pool(node, out, acts, shape):
            return  # over a feature map's rows and columns: a global pool
        if op == "Conv":
            self._conv(node, out, acts, attrs)
        elif op == "Gemm":
            rows, cols = self.weights[node.input[1]]
            self._emit(out, "fc", acts, out_features=rows if attrs.get("transB") else cols,
                       bias=len(node.input) > 2 and bool(node.input[2]))
        elif op == "MatMul" and len(acts) == 2:
            self._emit(out, "matmul", acts)
        elif op == "MatMul" and node.input[1] in self.weights and len(self.weights[
                node.input[1]]) == 2:
            self._emit(out, "fc", acts, out_features=self.weights[node.input[1]][1])
        elif op in ("MaxPool", "AveragePool"):
            self._emit(out, "pool", acts, mode="max" if op == "MaxPool" else "avg",
                       kernel=list(attrs["kernel_shape"]),
                       stride=list(attrs.get("strides", [1, 1])),
                       padding=self._pads(node, attrs, acts[0]),
                       ceil_mode=bool(attrs.get("ceil_mode", 0)))
        elif op in ("GlobalAveragePool", "GlobalMaxPool"):
            self._emit(out, "global_pool", acts, mode="avg" if "Average" in op else "max")
        elif op == "BatchNormalization":
            self._emit(out, "batch_norm", acts)
        elif op == "LayerNormalization":
            self._emit(out, "layer_norm", acts)
        elif op in ("Softmax", "LogSoftmax"):
            self._emit(out, "softmax", acts, axis=self._axis(attrs.get("axis", -1)))
        elif op == "Concat" and not const:
            self._emit(out, "concat", acts, axis=self._axis(attrs["axis"]))
        elif op == "Transpose":
            perm = list(attrs.get("perm", []))
            if not perm or perm[0] != 0:
                raise InputError(f"{self.path}: node {node.name or out} (Transpose) moves the "
                                 "batch axis; not supported")
            self._emit(out, "transpose", acts, perm=[p - 1 for p in perm[1:]])
        elif op == "Gather" and node.input[0] in self.weights and acts == [node.input[1]]:
            vocab, dim = self.weights[node.input[0]]
            self._emit(out, "embedding", acts, vocab=vocab, dim=dim)
        elif op in ("Add", "Mul") and len(acts) >= 2:
            self._emit(out, op.lower(), acts)
        elif op == "Flatten" and len(shape) == 1:
            self._emit(out, "flatten", acts)
        elif op in _RESHAPES:
            self._emit(out, "reshape", acts, shape=shape)
        elif op in _UNARY:
            self._emit(out, "act", acts, function=_UNARY[op])
        elif op in _PASS:
            self._emit(out, _PASS[op], acts)
        elif op == "Split":
            axis = self._axis(attrs.get("axis", 0))
            start = 0
            for part in node.output:
                size = self._sample_shape(part)[axis]
                self._emit(part, "slice", acts, axis=axis, start=start, stop=start + size)
                start += size
        elif op in _TENSOR_OPS or op == "Concat":
            learned = sum(math.prod(self.weights[c]) for c in const
                          if c in self.weights and math.prod(self.weights[c]) > 1
                          and op in ("Add", "Mul", "Sub", "Div", "PRelu", "Concat"))
            self._emit(out, "tensor_op", acts, function=op, shape=shape, params=learned)
        else:
            raise InputError(f"{self.path}: node {node.name or out}: unsupported operator "
                             f"{op}; supported: {', '.join(SUPPORTED)}")

    def _slice(self, node: Any, out: str, acts: list[str], shape: list[int]) -> bool:
        """A Slice of one axis of an activation, by constant bounds and step 1, as a `slice`
        node (ShuffleNet's channel split); False if it is not one."""
        if acts != [node.input[0]] or any(name not in self.values for name in node.input[1:]
                                          if name):
            return False
        before = self._sample_shape(node.input[0])
        changed = [axis for axis, (a, b) in enumerate(zip(before, shape, strict=True)) if a != b]
        bounds = [self.values[name] for name in node.input[1:] if name]
        steps = bounds[3] if len(bounds) > 3 else [1]
        if len(changed) != 1 or any(int(step) != 1 for step in steps):
            return False
        axes = [int(a) for a in bounds[2]] if len(bounds) > 2 else list(range(len(before) + 1))
        axis = changed[0]
        start = int(bounds[0][axes.index(axis + 1)]) if axis + 1 in axes else 0
        start = min(max(start + before[axis] if start < 0 else start, 0), before[axis])
        self._emit(out, "slice", acts, axis=axis, start=start, stop=start + shape[axis])
        return True

    def _global_pool(self, node: Any, out: str, acts: list[str], shape: list[int]) -> bool:
        """A mean or max over a feature map's rows and columns (ShuffleNet's x.mean([2, 3]))
        as a global pool, flattened when the reduced axes are dropped; False otherwise."""
        before = self._sample_shape(node.input[0])
        attrs = attributes(node)
        axes = attrs.get("axes")
        if axes is None and len(node.input) > 1 and node.input[1] in self.values:
            axes = [int(a) for a in self.values[node.input[1]]]
        if len(before) != 3 or axes is None or sorted(a % 4 for a in axes) != [2, 3]:
            return False
        mode = "avg" if node.op_type == "ReduceMean" else "max"
        if attrs.get("keepdims", 1):
            self._emit(out, "global_pool", acts, mode=mode)
        else:
            self._emit(f"{out}/pool", "global_pool", acts, mode=mode)
            self._emit(out, "flatten", [f"{out}/pool"])
        return True

    def _conv(self, node: Any, out: str, acts: list[str], attrs: dict[str, Any]) -> None:
        if node.input[1] not in self.weights:
            raise InputError(f"{self.path}: node {node.name or out} (Conv): its weights are "
                             "computed, not stored; not supported")
        kernels, _, *window = self.weights[node.input[1]]
        if len(window) != 2:
            raise InputError(f"{self.path}: node {node.name or out} (Conv): only 2-D "
                             f"convolutions are supported, got a {len(window)}-D kernel")
        self._emit(out, "conv", acts, out_channels=kernels, kernel=list(window),
                   stride=list(attrs.get("strides", [1, 1])),
                   padding=self._pads(node, attrs, acts[0]),
                   dilation=list(attrs.get("dilations", [1, 1])),
                   groups=int(attrs.get("group", 1)),
                   bias=len(node.input) > 2 and bool(node.input[2]))

    def _pads(self, node: Any, attrs: dict[str, Any], source: str) -> list[int]:
        """[top, left, bottom, right]; SAME_UPPER/SAME_LOWER from the output size."""
        auto = attrs.get("auto_pad", b"NOTSET")
        auto = auto.decode() if isinstance(auto, bytes) else auto
        if auto not in ("SAME_UPPER", "SAME_LOWER"):
            top, left, bottom, right = (list(attrs.get("pads", [0, 0, 0, 0])) + [0] * 4)[:4]
            return [top, left, bottom, right]
        _, rows, cols = self._sample_shape(source)
        kernel = attrs.get("kernel_shape") or self.weights[node.input[1]][2:]
        strides = attrs.get("strides", [1, 1])
        dilations = attrs.get("dilations", [1, 1])
        total = [max(0, (math.ceil(size / s) - 1) * s + (k - 1) * d + 1 - size)
                 for size, k, s, d in zip((rows, cols), kernel, strides, dilations,
                                          strict=True)]
        small = [t // 2 for t in total]
        big = [t - t // 2 for t in total]
        before, after = (small, big) if auto == "SAME_UPPER" else (big, small)
        return [before[0], before[1], after[0], after[1]]

    def _axis(self, axis: int) -> int:
        """An ONNX axis counted with the batch, as a per-sample axis."""
        if axis == 0:
            raise InputError(f"{self.path}: an operator acts along the batch axis; not "
                             "supported")
        return axis - 1 if axis > 0 else axis
