"""A lower bound on the bytes any plan of a network moves between accelerators (`--bound`).

Count in elements (words; a transfer carries whole elements, as the 2D/2.5D/3D
paper's bounds count words). For one layer split by a column of kinds, let
R_W be the number of members that hold the same weights (the product of the
level sizes whose kind splits a dimension the weights are not indexed by: N,
P, Q) and R_C the number of members whose outputs are partial sums of the same
elements (the product of the level sizes whose kind splits C).

Weights. With R_W > 1 each weight's gradient is a sum of R_W partial values
held by R_W different members, and each of them must hold the updated weight
for the next step. A member cannot know the sum without receiving something
that depends on the other partials; one element per weight is the least that
can carry it. So the R_W holders receive at least R_W elements per weight:
R_W x |W|.

Outputs. With R_C > 1 each output element is a sum of R_C partial values on
R_C members, and each of them needs the error of the complete output for its
weight gradient (dW = E_out x F_in over its samples, for all its output
channels), which depends on the complete value: again each receives at least
one element per output element: R_C x |F_out| (after pooling, which only
makes it smaller).

The two counts concern different tensors (a layer's weights, its output), so
over a chain they add up: the plan's bytes >= word x sum over layers of the
least, over every column of the allowed kinds, of R_W |W| [R_W > 1] + R_C |F_out|
[R_C > 1]. It is positive for a layer wherever every allowed kind replicates
weights or splits C (HyPar's batch and in); a kind that splits K (out) or rows
(spatial) moves inputs and halos instead, which this bound does not count, so
with those kinds it may be 0. Node by node on a graph (a node's own column;
weights of convolutions, fc layers and embeddings, partial outputs of every
node with a reduction C; a tied projection's weights are its owner's and
count once). It is tight on the two fc layers 4096 -> 16384 ->
4096 of "Partition algebra" with HyPar's kinds on two accelerators (both split
in: 1,310,720 bytes, plan and bound), and for data parallelism on two
accelerators (2 |W| per layer).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

from hypar_sim.partition import node_layout
from hypar_sim.partition.axes import sites as graph_sites
from hypar_sim.partition.hierarchy import Hierarchy
from hypar_sim.partition.kinds import Dim
from hypar_sim.partition.regions import weight_shape
from hypar_sim.workload.graph import Graph

_WEIGHT_DIMS = {Dim.K, Dim.C}


def node_bounds(graph: Graph, batch: int, hierarchy: Hierarchy, kinds: Sequence[str],
                word_bytes: int) -> list[float]:
    """Bytes per node of a graph (the module's two counts, node by node)."""
    columns = list(itertools.product(kinds, repeat=hierarchy.levels))
    bounds = []
    for site in graph_sites(graph):
        node, op = site.node, site.desc
        has_weights = op.weights is not None and op.weights.scale > 0
        weight_dims = {Dim.K} if op.lookup else {Dim.K, Dim.C, Dim.G}
        weights = math.prod(weight_shape(op)) * op.weights.scale if has_weights else 0
        outputs = batch * math.prod(node.shape)
        least = math.inf
        for column in columns:
            dims = [node_layout.dim_of(op, kind) for kind in column]
            replicas = math.prod(size for size, dim in zip(hierarchy.sizes, dims, strict=True)
                                 if dim not in weight_dims)
            partial = math.prod(size for size, dim in zip(hierarchy.sizes, dims, strict=True)
                                if dim is Dim.C and op.reduction is not None)
            count = (replicas * weights if replicas > 1 else 0) + \
                (partial * outputs if partial > 1 else 0)
            least = min(least, count)
        bounds.append(float(least) * word_bytes)
    return bounds
