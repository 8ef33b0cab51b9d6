"""What each layer type states about itself: its loop dimensions and the tensors they index.

Tofu's lesson: a partitioner that is generic over operators needs each
operator to describe its loop nest. A convolution's loops are N (samples),
K (output channels), C (input channels), P and Q (output rows and columns,
after pooling here) and the kernel's R and S (never split); an fc layer is
the same with P = Q = 1 (R = S = 1). Each tensor is indexed by some of them:

==============  ===============  =====================================
tensor          indexed by       split by a kind of another dimension
==============  ===============  =====================================
input F, E      N, C, P, Q       P, Q through the kernel's halo rows
weights W, dW   K, C             dW is partial over N, P, Q
output F', E'   N, K, P, Q       F' is partial over C (E is over K)
==============  ===============  =====================================

A loop dimension that does not index a tensor is a reduction of it (the
tensor is a partial sum where a kind splits that dimension) or, for a tensor
a layer reads, a replication. The layout model (`layout`, `totals`) reads
these sets; a new operator type (issue "Graph workloads") adds its entry.
"""

from __future__ import annotations

from dataclasses import dataclass

from hypar_sim.partition.kinds import Dim
from hypar_sim.workload.layers import Layer, LayerKind


@dataclass(frozen=True)
class OperatorDims:
    """The loop dimensions of a layer type and the ones that index each of its tensors."""

    loops: tuple[Dim, ...]
    input: frozenset[Dim]
    weights: frozenset[Dim]
    output: frozenset[Dim]

    def reductions(self, tensor: frozenset[Dim]) -> frozenset[Dim]:
        """Loop dimensions a tensor is summed over (partial where a kind splits them)."""
        return frozenset(self.loops) - tensor


_CONV = OperatorDims(
    loops=(Dim.N, Dim.K, Dim.C, Dim.P, Dim.Q),
    input=frozenset({Dim.N, Dim.C, Dim.P, Dim.Q}),
    weights=frozenset({Dim.K, Dim.C}),
    output=frozenset({Dim.N, Dim.K, Dim.P, Dim.Q}),
)

#: Layer type -> its dimensions (an fc layer is a 1x1 convolution on a 1x1 map).
OPERATORS: dict[LayerKind, OperatorDims] = {LayerKind.CONV: _CONV, LayerKind.FC: _CONV}


def extents(layer: Layer, batch: int) -> dict[Dim, int]:
    """The size of every loop dimension of `layer` for `batch` samples."""
    sizes = {Dim.N: batch, Dim.K: layer.output.channels, Dim.C: layer.input.channels,
             Dim.P: layer.output.height, Dim.Q: layer.output.width}
    return {dim: sizes[dim] for dim in OPERATORS[layer.kind].loops}
