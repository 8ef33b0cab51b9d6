"""Shape arithmetic of an ONNX model folded into constants, then shapes inferred.

Exporters compute Reshape targets from the input's shape at run time (Shape,
Gather, Div, Cast, Unsqueeze, Concat: ShuffleNet's channel shuffle, a
transformer's heads). ONNX's data propagation follows only some of those
operators; once the batch and sequence are fixed, every such value is a
constant. This evaluates them with numpy (small integer tensors only), turns
their nodes into Constant nodes, and infers shapes again, until nothing more
folds.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from hypar_sim.errors import InputError, clip_value

#: Largest value folded (elements): shapes, axes, indices.
MAX_FOLDED = 64


def attributes(node: Any) -> dict[str, Any]:
    from onnx import helper

    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def _axes(node: Any, values: list[np.ndarray]) -> list[int]:
    given = attributes(node).get("axes")
    return list(given) if given is not None else [int(a) for a in values[1]]


def _unsqueeze(node: Any, values: list[np.ndarray]) -> np.ndarray:
    out = values[0]
    for axis in sorted(a % (out.ndim + len(_axes(node, values))) for a in _axes(node, values)):
        out = np.expand_dims(out, axis)
    return out


def _slice(node: Any, values: list[np.ndarray]) -> np.ndarray:
    data, starts, ends = values[:3]
    axes = values[3] if len(values) > 3 else np.arange(len(starts))
    steps = values[4] if len(values) > 4 else np.ones(len(starts), dtype=np.int64)
    index = [slice(None)] * data.ndim
    for start, end, axis, step in zip(starts, ends, axes, steps, strict=True):
        index[int(axis)] = slice(int(start), int(end), int(step))
    return data[tuple(index)]


def _divide(node: Any, values: list[np.ndarray]) -> np.ndarray:
    a, b = values
    return a // b if np.issubdtype(a.dtype, np.integer) else a / b


def _cast(node: Any, values: list[np.ndarray]) -> np.ndarray:
    from onnx import helper

    return values[0].astype(helper.tensor_dtype_to_np_dtype(attributes(node)["to"]))


def _constant_of_shape(node: Any, values: list[np.ndarray]) -> np.ndarray:
    from onnx import numpy_helper

    given = attributes(node).get("value")
    fill = numpy_helper.to_array(given).reshape(-1)[0] if given is not None else np.float32(0)
    if int(np.prod(values[0])) > MAX_FOLDED:
        raise ValueError("too large to fold")
    return np.full(values[0].tolist(), fill, dtype=np.asarray(fill).dtype)


_OPS: dict[str, Callable[[Any, list[np.ndarray]], np.ndarray]] = {
    "Gather": lambda n, v: np.take(v[0], v[1], axis=attributes(n).get("axis", 0)),
    "Unsqueeze": _unsqueeze,
    "Squeeze": lambda n, v: np.squeeze(v[0], axis=tuple(_axes(n, v))) if len(v) > 1 or
    attributes(n).get("axes") else np.squeeze(v[0]),
    "Concat": lambda n, v: np.concatenate(v, axis=attributes(n)["axis"]),
    "Cast": _cast,
    "Div": _divide,
    "Mul": lambda n, v: v[0] * v[1],
    "Add": lambda n, v: v[0] + v[1],
    "Sub": lambda n, v: v[0] - v[1],
    "Slice": _slice,
    "Identity": lambda n, v: v[0],
    "Floor": lambda n, v: np.floor(v[0]),
    "Ceil": lambda n, v: np.ceil(v[0]),
    "Range": lambda n, v: np.arange(v[0], v[1], v[2]),
    "Mod": lambda n, v: np.fmod(v[0], v[1]) if attributes(n).get("fmod") else
    np.mod(v[0], v[1]),
    "Neg": lambda n, v: -v[0],
    "Abs": lambda n, v: np.abs(v[0]),
    "Max": lambda n, v: np.maximum.reduce(v),
    "Min": lambda n, v: np.minimum.reduce(v),
    "Equal": lambda n, v: np.equal(v[0], v[1]),
    "Less": lambda n, v: np.less(v[0], v[1]),
    "Greater": lambda n, v: np.greater(v[0], v[1]),
    "Not": lambda n, v: np.logical_not(v[0]),
    "And": lambda n, v: np.logical_and(v[0], v[1]),
    "Or": lambda n, v: np.logical_or(v[0], v[1]),
    "Where": lambda n, v: np.where(v[0], v[1], v[2]),
    "Reshape": lambda n, v: v[0].reshape([d if d else v[0].shape[i] for i, d in
                                          enumerate(v[1].tolist())]),
    "Transpose": lambda n, v: np.transpose(v[0], attributes(n).get("perm")),
    "Expand": lambda n, v: v[0] * np.ones(v[1].tolist(), dtype=v[0].dtype),
    "ConstantOfShape": _constant_of_shape,
}


def _fold(node: Any, values: list[np.ndarray]) -> np.ndarray | None:
    """The node's value, or None where numpy cannot compute it (left to the importer)."""
    try:
        return _OPS[node.op_type](node, values)
    except (ValueError, TypeError, IndexError, ZeroDivisionError, MemoryError):
        return None


def _shape(node: Any, shapes: dict[str, tuple[int, ...]]) -> np.ndarray | None:
    shape = shapes.get(node.input[0])
    if shape is None:
        return None
    a = attributes(node)
    return np.array(shape[a.get("start", 0):a.get("end", len(shape))], dtype=np.int64)


def static_shapes(model: Any) -> dict[str, tuple[int, ...]]:
    shapes = {}
    for info in [*model.graph.input, *model.graph.value_info, *model.graph.output]:
        dims = info.type.tensor_type.shape.dim
        if info.type.tensor_type.HasField("shape") and all(d.HasField("dim_value") for d in dims):
            shapes[info.name] = tuple(d.dim_value for d in dims)
    return shapes


def skeleton(model: Any) -> None:
    """Large initializers become typed graph inputs (in place): shape inference needs their
    shapes, not their values, and runs much faster without copying them."""
    from onnx import helper

    listed = {i.name for i in model.graph.input}
    kept = []
    for tensor in model.graph.initializer:
        if np.prod(tensor.dims) <= MAX_FOLDED:
            kept.append(tensor)
        elif tensor.name not in listed:
            model.graph.input.append(helper.make_tensor_value_info(
                tensor.name, tensor.data_type, list(tensor.dims)))
    del model.graph.initializer[:]
    model.graph.initializer.extend(kept)


def small_external_values(model: Any, folder: Path) -> list[str]:
    """Read the values of the small initializers (those `skeleton` keeps: shapes, axes)
    that an export stores as external data, each from its own offset, no more bytes than
    the tensor has; those whose file is absent (or outside the model's folder) become typed
    graph inputs, their values unknown. Returns their names."""
    from onnx import TensorProto, helper
    from onnx.external_data_helper import uses_external_data

    missing, kept = [], []
    listed = {i.name for i in model.graph.input}
    for tensor in model.graph.initializer:
        if not uses_external_data(tensor):
            kept.append(tensor)
            continue
        info = {entry.key: entry.value for entry in tensor.external_data}
        size = int(np.prod(tensor.dims)) * helper.tensor_dtype_to_np_dtype(
            tensor.data_type).itemsize
        file = (folder / info.get("location", "")).resolve()
        length = info.get("length", str(size))
        if not length.isdigit() or int(length) != size:
            raise InputError(f"{file}: the external data of tensor {tensor.name} is "
                             f"{clip_value(length)} bytes long; its {list(tensor.dims)} values "
                             f"take {size:,}")
        try:
            if folder.resolve() not in file.parents:
                raise OSError("outside the model's folder")
            with open(file, "rb") as handle:
                handle.seek(int(info.get("offset", 0)))
                data = handle.read(size)
            if len(data) != size:
                raise OSError("shorter than its tensor")
        except (OSError, ValueError):
            missing.append(tensor.name)
            if tensor.name not in listed:  # old exporters list initializers as inputs too
                model.graph.input.append(helper.make_tensor_value_info(
                    tensor.name, tensor.data_type, list(tensor.dims)))
            continue
        tensor.raw_data = data
        tensor.data_location = TensorProto.DEFAULT
        del tensor.external_data[:]
        kept.append(tensor)
    del model.graph.initializer[:]
    model.graph.initializer.extend(kept)
    return missing


def _infer(model: Any) -> Any:
    """ONNX's shape inference with data propagation, strict; where the strict pass fails on
    index arithmetic of no shape's concern (ONNX propagates a batch index range as if it
    were a shape: transformers' mask building), the lenient pass: an activation it leaves
    without a shape is then reported by the importer, by name."""
    from onnx import shape_inference

    try:
        return shape_inference.infer_shapes(model, strict_mode=True, data_prop=True)
    except Exception as strict:  # the package raises InferenceError and others
        try:
            return shape_inference.infer_shapes(model, strict_mode=False, data_prop=True)
        except Exception:
            raise strict from None


def fold_and_infer(model: Any, rounds: int = 32) -> tuple[Any, dict[str, np.ndarray]]:
    """The model with its shape arithmetic folded and its shapes inferred, and the small
    constant values it knows (initializers, Constant nodes, what it folded)."""
    from onnx import helper, numpy_helper

    values = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer
              if np.prod(t.dims) <= MAX_FOLDED}
    for _ in range(rounds):
        inferred = _infer(model)
        shapes = static_shapes(inferred)
        folded, nodes = False, []
        for node in inferred.graph.node:
            value = None
            if node.op_type == "Constant":
                attr = attributes(node).get("value")
                if attr is not None and np.prod(attr.dims) <= MAX_FOLDED:
                    values[node.output[0]] = numpy_helper.to_array(attr)
            elif node.op_type == "Shape":
                value = _shape(node, shapes)
            elif node.op_type in _OPS and len(node.output) == 1 and node.input and \
                    all(name in values for name in node.input if name):
                value = _fold(node, [values[name] for name in node.input if name])
            if value is not None and np.size(value) <= MAX_FOLDED:
                value = np.asarray(value)
                values[node.output[0]] = value
                nodes.append(helper.make_node("Constant", [], [node.output[0]],
                                              value=numpy_helper.from_array(value)))
                folded = True
            else:
                nodes.append(node)
        if not folded:
            return inferred, values
        del model.graph.node[:]
        model.graph.node.extend(nodes)
        del model.graph.value_info[:]
    return _infer(model), values
