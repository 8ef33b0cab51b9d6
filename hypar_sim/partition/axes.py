"""Which loop dimension every axis of every tensor of a graph is (named axes).

A split kind splits a loop (`kinds`); on a graph the planner must know, for
every tensor, which of its axes is which loop. Every node's description
(`workload.tdl`, made when the graph is read) names the loops of its output's
axes from those of its inputs, as named tensors do: an image is (K channels,
P rows, Q columns), a token stream (P positions, K features); a convolution
makes (K, P, Q); an fc layer keeps its input's leading axes and makes K (a
feature map is flattened to K); a reshape that splits features into (heads,
features) names the new outer axis H, one that merges axes names the result
K if one of them was K, else after the innermost; a transpose permutes; a
product of two activations keeps A's leading axes and rows and takes B's
columns (K when that name is taken, as the key positions of attention scores
are); every other operator keeps the names of its first input of its shape.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property

from hypar_sim.errors import InputError
from hypar_sim.workload.dims import Dims
from hypar_sim.workload.graph import Graph, Node
from hypar_sim.workload.tdl import Description


@dataclass(frozen=True)
class Site:
    """A node with the loop of every axis of its inputs and of its output, and its
    description."""

    node: Node
    inputs: tuple[Dims, ...]
    output: Dims

    @property
    def desc(self) -> Description:
        return self.node.desc  # type: ignore[return-value] # sites() refuses None

    @cached_property
    def geometry(self) -> tuple:
        """What the node's costs depend on (not its name nor its inputs' names): the key
        the planner's cost tables remember a cost by (a network repeats its blocks)."""
        def frozen(value: object) -> object:
            if isinstance(value, Mapping):
                return tuple(sorted((k, frozen(v)) for k, v in value.items()))
            return tuple(frozen(v) for v in value) if isinstance(value, list | tuple) else value
        node = self.node
        return (node.op, node.input_shapes, node.shape, self.inputs, self.output,
                tuple(sorted((k, frozen(v)) for k, v in node.attrs.items())))


def sites(graph: Graph) -> list[Site]:
    """Every node with the loops of its tensors' axes; a node with no description (an
    operator that cannot be described there) is refused in one line naming it."""
    result = []
    for node in graph.nodes:
        if node.desc is None:
            raise InputError(f"{graph.name}: {node.why}")
        result.append(Site(node, node.input_dims, node.desc.output))
    return result
