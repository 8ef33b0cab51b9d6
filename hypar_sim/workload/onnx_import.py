"""ONNX import: a model file becomes a `Graph` (the same operators as the YAML graphs).

Steps: load with the `onnx` package, shapes only (no weight bytes are read:
large initializers become typed inputs, `onnx_fold.skeleton`); bind the
symbolic axes (`onnx_dims.bind_inputs`: the batch to a probe, the sequence to
`--seq`, other named axes to `--dim`); fold the shape arithmetic and infer
every shape (`onnx_fold`); find the axis that carries the samples in every
tensor (`onnx_dims.sampled`); then map every node that reads an activation (a
tensor that depends on a graph input) to an operator of `ops`, per sample
(`onnx_nodes`). Nodes that only compute on constants or shapes are folded
away. Each node is named after its output tensor; every shape our operators
infer is checked against ONNX's.

Parameters are counted from the weights the operators read (a convolution's
kernel and bias, a Gemm's or MatMul's matrix, a normalisation's scale and
shift, an embedding table); a learned tensor that an elementwise operator
adds or multiplies (a bias after a MatMul, a layer scale) counts at that
`tensor_op` node, once, however many nodes read it; a constant computed from
learned tensors counts the tensors it is computed from. Scalars do not count.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from hypar_sim.errors import InputError
from hypar_sim.workload.dims import Dim
from hypar_sim.workload.graph import Graph, parse_graph
from hypar_sim.workload.onnx_dims import Binding, Sampled, bind_inputs, sampled
from hypar_sim.workload.onnx_fold import attributes, static_shapes

#: ONNX element types of learned values (float, float16, double, bfloat16).
_FLOATS = (1, 10, 11, 16)


def load_onnx(path: Path, seq: int | None = None,
              dims: Mapping[str, int] | None = None) -> Graph:
    """The graph of the ONNX model at `path` (per-sample shapes; dynamic axes bound from
    `seq` and `dims`, `onnx_dims.bind_inputs`)."""
    import onnx  # a heavy import, only when a model is read

    from hypar_sim.workload.onnx_fold import fold_and_infer, skeleton, small_external_values
    from hypar_sim.workload.onnx_nodes import check_graph

    try:
        model = onnx.load(str(path), load_external_data=False)  # shapes only: no weights read
    except Exception as exc:  # the package raises protobuf's DecodeError and others
        raise InputError(f"{path}: not an ONNX model, or a truncated one "
                         f"({type(exc).__name__})") from None
    if not model.graph.node:
        raise InputError(f"{path}: not an ONNX model, or a truncated one (no graph nodes)")
    check_graph(path, model)
    initializers = {t.name: t for t in model.graph.initializer}
    inputs = [i for i in model.graph.input if i.name not in initializers]
    binding = bind_inputs(path, inputs, seq, dims or {})
    weights = {name: tuple(t.dims) for name, t in initializers.items()}
    learned = {name for name, t in initializers.items()
               if t.data_type in _FLOATS and math.prod(t.dims) > 1}
    skeleton(model)
    missing = small_external_values(model, path.parent)
    absent = (f" (the values of {', '.join(missing[:3])} are in an external data file that "
              "is not there)") if missing else ""
    try:
        model, small = fold_and_infer(model)
    except Exception as exc:
        raise InputError(f"{path}: ONNX shape inference failed: "
                         f"{str(exc).splitlines()[0][:200]}{absent}") from None
    return Importer(path, model, binding, weights, learned, small, absent).graph(inputs)


class Importer:
    """Maps the nodes of one inferred model to graph nodes, per sample."""

    def __init__(self, path: Path, model: Any, binding: Binding,
                 weights: dict[str, tuple[int, ...]], learned: set[str],
                 values: dict[str, Any], absent: str = "") -> None:
        self.path, self.model, self.binding, self.absent = path, model, binding, absent
        self.weights = dict(weights)  # every constant tensor's (whole) shape
        self.values = dict(values)  # small constants: shapes, axes, scalars
        self.shapes = static_shapes(model)  # every tensor whose shape inference knows
        self.sources = {name: frozenset({name}) for name in learned}  # constant -> learned
        self.counted: set[str] = set()  # learned tensors counted at some node
        self.owner: dict[str, str] = {}  # learned tensor -> the weighted node that owns it
        self.active: set[str] = set()
        self.alias: dict[str, str] = {}  # a tensor -> the one it is per sample (`same`)
        self.outputs = {o.name for o in model.graph.output}
        self.nodes: list[dict[str, Any]] = []
        self._sampled: dict[str, Sampled] = {}

    def graph(self, inputs: list) -> Graph:
        from hypar_sim.workload.onnx_nodes import map_node

        graph_inputs, positions = {}, {}
        for tensor in inputs:
            graph_inputs[tensor.name] = list(self.sample(tensor.name).shape)
            self.active.add(tensor.name)
            if len(graph_inputs[tensor.name]) == 1 and \
                    tensor.type.tensor_type.elem_type in (6, 7):  # token ids, or a mask
                positions[tensor.name] = (Dim.P,)  # per token: positions, whoever reads them
        for node in self.model.graph.node:
            if node.op_type in ("Constant", "Shape", "Size") or \
                    not any(i in self.active for i in node.input):
                self._constant(node)
            else:
                map_node(self, node)
        outputs = [o.name for o in self.model.graph.output if o.name in self.active]
        name = self.model.graph.name or self.path.stem
        data = {"name": self.path.stem, "description": f"imported from ONNX graph '{name}'",
                "source": str(self.path), "inputs": graph_inputs, "nodes": self.nodes,
                "outputs": outputs}
        graph = parse_graph(data, str(self.path), default_name=self.path.stem,
                            input_dims=positions)
        for node in graph.nodes:
            if node.name not in self.shapes or node.attrs.get("pool"):
                continue  # a node the import added (a global pool's flatten), or a
                # convolution with its pooling folded in (`graph.fold_pools`)
            expected = self.sample(node.name).shape
            if node.shape != expected:
                raise InputError(f"{self.path}: node {node.name} ({node.op}): shape "
                                 f"{list(node.shape)} here, ONNX infers {list(expected)}")
        return dataclasses.replace(graph, notes=self.binding.notes,
                                   axes=dict(self.binding.sizes))

    def _constant(self, node: Any) -> None:
        """A node on constants or shapes only: folded (the shapes of its outputs kept for
        the nodes that read them, and the learned tensors they are computed from)."""
        made = frozenset().union(*(self.sources.get(i, ()) for i in node.input))
        if node.op_type == "Identity" and made:  # the exporter's copy of an equal tensor:
            made = frozenset(node.output)  # learned values of their own (a bias of zeros)
            self.weights[node.output[0]] = self.weights.get(node.input[0], ())
            value = attributes(node).get("value")
            if value is not None and value.data_type in _FLOATS and math.prod(value.dims) > 1:
                made = frozenset({node.output[0]})
        for out in node.output:
            if out in self.shapes:
                self.weights[out] = self.shapes[out]
            if made:
                self.sources[out] = made

    def sample(self, name: str) -> Sampled:
        """Tensor `name` per sample (`onnx_dims.sampled`), or a one-line error."""
        if name in self._sampled:
            return self._sampled[name]
        shape = self.shapes.get(name)
        if shape is None:
            raise InputError(f"{self.path}: tensor {name}: ONNX shape inference gives no "
                             f"static shape{self.absent}")
        view = sampled(shape, self.binding.probe)
        if isinstance(view, str):
            raise InputError(f"{self.path}: tensor {name} of shape {self._shown(shape)} "
                             f"{view}")
        self._sampled[name] = view
        return view

    def _shown(self, shape: tuple[int, ...]) -> str:
        """A shape at the probe batch, the probe shown as 'batch'."""
        probe = self.binding.probe
        return "[" + ", ".join("batch" if s == probe else f"batch*{s // probe}"
                               if probe and s and s % probe == 0 else str(s)
                               for s in shape) + "]"

    def axis(self, node: Any, tensor: str, axis: int) -> int:
        """ONNX axis `axis` of `tensor` as a per-sample axis; the batch axis is an error."""
        mapped = self.sample(tensor).sample_axis(int(axis))
        if mapped is None:
            raise self.refuse(node, "acts along the batch axis")
        return mapped

    def learned_params(self, names: list[str]) -> int:
        """Learned values among the constants `names` reads (each counted once)."""
        fresh = set().union(*(self.sources.get(n, ()) for n in names)) - self.counted
        self.counted |= fresh
        return sum(math.prod(self.weights[n]) for n in fresh if n in self.weights)

    def claim(self, name: str, weight: str) -> str:
        """Weight `weight` read by weighted node `name`: '' if it is the node's own, else
        the node that owns it already (tied weights: GPT-2's output projection)."""
        tensors = self.sources.get(weight, frozenset())
        for tensor in tensors:
            if tensor in self.owner:
                return self.owner[tensor]
        for tensor in tensors:
            self.owner[tensor] = name
        self.counted |= tensors
        return ""

    def emit(self, name: str, op: str, inputs: list[str], **attrs: Any) -> None:
        self.nodes.append({"name": name, "type": op,
                           "inputs": [self.alias.get(i, i) for i in inputs], **attrs})
        self.active.add(name)

    def same(self, name: str, source: str) -> bool:
        """Read tensor `name` as `source` itself (a reshape that changes nothing per sample:
        [1, 128] to [128] at a fixed batch of 1); False where `name` must be a node of its
        own (a graph output)."""
        if name in self.outputs:
            return False
        self.alias[name] = self.alias.get(source, source)
        self.active.add(name)
        return True

    def refuse(self, node: Any, why: str) -> InputError:
        """A one-line error naming the node, its operator and its input shapes."""
        shapes = ", ".join(self._shown(self.shapes[i]) if i in self.shapes else "?"
                           for i in node.input if i)
        return InputError(f"{self.path}: node {node.name or node.output[0]} ({node.op_type} "
                          f"of {shapes}): {why}")
