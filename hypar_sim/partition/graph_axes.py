"""Which loop dimension every axis of every tensor of a graph is (named axes).

A split kind splits a dimension (`kinds`); on a graph the planner must know,
for every tensor, which of its axes is which dimension. The labels flow from
the inputs through the operators, as named tensors do: an image is
(K channels, P rows, Q columns), a token stream (P positions, K features);
a convolution makes (K, P, Q); an fc layer keeps its input's leading axes and
makes K (a feature map is flattened to K); a reshape that splits features
into (heads, features) names the new outer axis H, and one that merges axes
names the result K if one of them was K (ShuffleNet's channel shuffle puts
the channels back together), else after the innermost; a transpose permutes;
a product of two activations keeps A's leading axes and rows and takes B's
columns (K when that name is taken, as the key positions of attention
scores are); every other operator keeps its first input's names.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from hypar_sim.errors import InputError
from hypar_sim.partition.kinds import Dim
from hypar_sim.workload.graph import Graph, Node

Dims = tuple[Dim, ...]  # one per axis of a per-sample shape


@dataclass(frozen=True)
class Site:
    """A node with the dimension of every axis of its inputs and of its output."""

    node: Node
    inputs: tuple[Dims, ...]
    output: Dims


def _input_dims(graph: Graph, name: str, shape: Sequence[int]) -> Dims:
    if len(shape) == 3:
        return Dim.K, Dim.P, Dim.Q
    if len(shape) == 1:
        readers = [n.op for n in graph.nodes if name in n.inputs]
        return (Dim.P,) if "embedding" in readers else (Dim.K,)
    if len(shape) == 2:
        return Dim.P, Dim.K
    raise InputError(f"{graph.name}: input {name} of shape {list(shape)}: graph planning "
                     "takes images (3 axes), token streams (1 or 2 axes) and vectors")


def reshape_groups(source: Sequence[int], target: Sequence[int]) -> list[tuple[range, range]]:
    """Runs of axes of `source` and `target` with equal products (each maps onto the other:
    the finest such pairing)."""
    groups, i, j = [], 0, 0
    while i < len(source) or j < len(target):
        a, b = i + 1, j + 1
        left = source[i] if i < len(source) else 1
        right = target[j] if j < len(target) else 1
        while left != right:
            if left < right:
                left *= source[a]
                a += 1
            else:
                right *= target[b]
                b += 1
        a, b = min(a, len(source)), min(b, len(target))
        groups.append((range(i, a), range(j, b)))
        i, j = a, b
    return groups


def _reshape(node: Node, dims: Dims) -> Dims:
    out: list[Dim] = []
    for source, target in reshape_groups(node.input_shapes[0], node.shape):
        labels = [dims[i] for i in source]
        inner = Dim.K if Dim.K in labels or not labels else labels[-1]
        if len(target) == 1:
            out.append(inner)
        elif len(target) > 1:
            outer = [Dim.H, Dim.Q, Dim.P][:len(target) - 1]
            out += [*outer, inner]
    return tuple(out)


def _matmul(node: Node, a: Dims, b: Dims) -> Dims:
    out = [*a[:-1]]
    column = b[-2] if node.attrs["transpose_b"] else b[-1]
    if column in out:
        column = next(d for d in (Dim.K, Dim.P, Dim.Q, Dim.H) if d not in out)
    return (*out, column)


def _output(node: Node, inputs: Sequence[Dims]) -> Dims:
    first = inputs[0]
    if node.op == "conv" or node.op == "global_pool":
        return Dim.K, Dim.P, Dim.Q
    if node.op == "fc":
        return (Dim.K,) if len(first) == 3 else (*first[:-1], Dim.K)
    if node.op == "embedding":
        return first[0], Dim.K
    if node.op == "flatten":
        return (Dim.K,)
    if node.op == "reshape":
        return _reshape(node, first)
    if node.op == "transpose":
        return tuple(first[p] for p in node.attrs["perm"])
    if node.op == "matmul":
        return _matmul(node, first, inputs[1])
    if node.op == "tensor_op" and node.shape != node.input_shapes[0]:
        raise InputError(f"node {node.name} (tensor_op {node.attrs['function']}) changes the "
                         "shape; graph planning takes tensor_ops that keep it")
    return first


def sites(graph: Graph) -> list[Site]:
    """Every node with the dimensions of its tensors' axes (inputs first named here)."""
    dims = {name: _input_dims(graph, name, shape) for name, shape in graph.inputs.items()}
    result = []
    for node in graph.nodes:
        inputs = tuple(dims[name] for name in node.inputs)
        output = _output(node, inputs)
        if len(set(output)) != len(output) or len(output) != len(node.shape):
            raise InputError(f"{graph.name}: node {node.name} ({node.op}): cannot name the axes "
                             f"of its output {list(node.shape)} (got {''.join(output)})")
        dims[node.name] = output
        result.append(Site(node, inputs, output))
    return result
