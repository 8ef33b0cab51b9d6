"""The messages of a graph plan: every edge's and node's transfers, by step.

An edge's tensor moves from the layout its producer leaves into the one its
consumer reads, forward, and its error back (`partition.node_layout`); a
node's gradients are all-reduced; the graph's output is reduced for the loss.
Where several consumers read a tensor alike (the same regions for every
member: q, k and v of an attention block reading one layer norm), the tensor
moves once and their errors, added where they are, are reduced once
(`read_groups`); the planner's costs (`shared_cost`) count it the same way.
Steps are keyed like a chain's (node, why) and sent by the `ring` collective.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from hypar_sim.partition import layout_costs, node_layout
from hypar_sim.partition.axes import Site
from hypar_sim.partition.axes import sites as graph_sites
from hypar_sim.partition.collectives import COLLECTIVES, Transfers
from hypar_sim.partition.hierarchy import Hierarchy
from hypar_sim.partition.moved import Moved
from hypar_sim.partition.shares import Column
from hypar_sim.partition.steps import StepMessages, TransferKind
from hypar_sim.planner.traffic import TRAFFIC_MODELS, TrafficModel
from hypar_sim.planner.training import Training, recompute_plan
from hypar_sim.resources import check_memory
from hypar_sim.workload.graph import Graph

Edge = tuple[int, int, int]  # (producer, consumer, input index)


def graph_edges(graph: Graph) -> list[tuple[int, int, int]]:
    """(producer, consumer, input index) between nodes (graph inputs cost nothing)."""
    index = {node.name: i for i, node in enumerate(graph.nodes)}
    return [(index[source], j, k) for j, node in enumerate(graph.nodes)
            for k, source in enumerate(node.inputs) if source in index]


def fed_nodes(graph: Graph) -> set[str]:
    """Names of the nodes that read another node's output: those with a backward pass (a
    node that reads only graph inputs computes no error)."""
    return {graph.nodes[c].name for _, c, _ in graph_edges(graph)}


def sharing_edges(graph: Graph) -> list[list[Edge]]:
    """Edges grouped by producer: those of its consumers that read the same regions under
    their columns share one transfer (`shared_cost`)."""
    groups: dict[int, list[Edge]] = {}
    for p, c, k in graph_edges(graph):
        groups.setdefault(p, []).append((p, c, k))
    return list(groups.values())


def read_groups(graph: Graph, layouts: Sequence[node_layout.NodeLayout]) -> list[list[Edge]]:
    """The edges of a plan grouped by producer and by how their consumers' members read it
    (`NodeLayout.read_signature`: alike, one transfer serves them all)."""
    groups: dict[tuple, list[Edge]] = {}
    for p, c, k in graph_edges(graph):
        groups.setdefault((p, layouts[c].read_signature(k)), []).append((p, c, k))
    return list(groups.values())


def paying_edges(costs: layout_costs.Costs, sites: Sequence[Site], edges: Sequence[Edge],
                 columns: Sequence[Column], hierarchy: Hierarchy) -> list[Edge]:
    """The edges of a group of `sharing_edges` that pay under `columns`: of the consumers
    that read the same regions, the first."""
    paying, seen = [], set()
    for p, c, k in edges:
        if len(edges) > 1:
            reads = costs.reads(sites[c], k, columns[c], hierarchy)
            if reads in seen:
                continue
            seen.add(reads)
        paying.append((p, c, k))
    return paying


def shared_cost(costs: layout_costs.Costs, sites: Sequence[Site], edges: Sequence[Edge],
                columns: Sequence[Column], hierarchy: Hierarchy) -> float:
    """Bytes of a group of `sharing_edges` under `columns` (every node's; only the group's
    nodes are read): consumers that read the same regions pay once."""
    return sum((costs.edge(sites[p], sites[c], k, columns[p], columns[c], hierarchy)
                for p, c, k in paying_edges(costs, sites, edges, columns, hierarchy)), 0.0)


def shared_table(costs: layout_costs.Costs, sites: Sequence[Site], edges: Sequence[Edge],
                 options: Sequence[Sequence[Column]], hierarchy: Hierarchy
                 ) -> tuple[tuple[int, ...], list[float]]:
    """The group's nodes (producer first) and its bytes for every combination of their
    options (C order), for the planner's min-sum elimination: `shared_cost` of every cell,
    from each edge's table over its two nodes (`Costs.edge_table`) and each consumer's read
    signatures, broadcast over the grid (an edge counts where no earlier edge of the group
    reads alike), so that the edges' costs are computed once, not once per cell."""
    nodes = tuple(dict.fromkeys([edges[0][0], *(c for _, c, _ in edges)]))
    shape = [len(options[n]) for n in nodes]
    axis = {n: i for i, n in enumerate(nodes)}

    def spread(values: np.ndarray, along: Sequence[int]) -> np.ndarray:
        """`values` over the nodes `along` (in order), broadcast to the whole grid."""
        view = [1] * len(nodes)
        for n, size in zip(along, values.shape, strict=True):
            view[axis[n]] = size
        return np.broadcast_to(values.reshape(view), shape)

    ids: dict[tuple, int] = {}
    total = np.zeros(shape)
    signatures: list[np.ndarray] = []
    for p, c, k in edges:
        cost = spread(np.asarray(costs.edge_table(sites[p], sites[c], k, options[p],
                                                  options[c], hierarchy), dtype=float), (p, c))
        signature = spread(np.array([ids.setdefault(costs.reads(sites[c], k, column,
                                                                hierarchy), len(ids))
                                     for column in options[c]]), (c,))
        alone = np.ones(shape, dtype=bool)
        for earlier in signatures:
            alone &= earlier != signature
        total += np.where(alone, cost, 0.0)
        signatures.append(signature)
    return nodes, total.reshape(-1).tolist()


#: The step each stage of an edge, a gradient or the loss goes into, keyed like a chain's:
#: an edge's forward reduce by its producer, its forward gather by its consumer, its
#: backward reduce by the consumer, its backward gather by the producer.
EDGE_STAGES = {"forward reduce": (TransferKind.PARTIAL_SUM, True),
                "forward gather": (TransferKind.RELAYOUT_FEATURE, False),
                "backward reduce": (TransferKind.ERROR_REDUCE, False),
                "backward gather": (TransferKind.ERROR_GATHER, True)}
OWN_STAGES = {"gradient reduce": TransferKind.GRADIENT, "vector reduce": TransferKind.GRADIENT,
               "gradient gather": TransferKind.GRADIENT_GATHER,
               "vector gather": TransferKind.GRADIENT_GATHER,
               "loss reduce": TransferKind.PARTIAL_SUM, "loss gather": TransferKind.ERROR_GATHER}

StepKey = tuple[int, TransferKind]


def graph_steps(matrices: Mapping[StepKey, Moved], hierarchy: Hierarchy,
                buckets: Sequence[Sequence[int]] = (), collective: str = "ring"
                ) -> dict[StepKey, StepMessages]:
    """Every message of a plan's steps (`graph_matrices`), by step (see `sent`)."""
    return {key: transfers.messages(key[0], key[1], hierarchy) for key, transfers in
            sent(matrices, buckets, collective, hierarchy).items()}


def gradient_buckets(graph: Graph, order: Sequence[int], word_bytes: int,
                     bucket_bytes: float) -> list[list[int]]:
    """Gradient buckets as data-parallel frameworks fuse them (PyTorch DDP: Li et al.,
    "PyTorch Distributed", VLDB 2020, section 3.2.3; 25 MB by default): walking the nodes
    with parameters in backward `order`, gradients join a bucket until it holds
    `bucket_bytes`; 0: a bucket per node. A bucket's last node completes it."""
    buckets: list[list[int]] = []
    held = 0.0
    for i in order:
        size = graph.nodes[i].params * word_bytes
        if not size:
            continue
        if not buckets or held >= bucket_bytes or bucket_bytes <= 0:
            buckets.append([])
            held = 0.0
        buckets[-1].append(i)
        held += size
    return buckets


def graph_matrices(graph: Graph, layouts: Sequence[node_layout.NodeLayout], batch: int,
                   word_bytes: int, forward_only: bool = False) -> dict[StepKey, Moved]:
    """Bytes [src, dst] of every step of a plan (node index, why): its stages' matrices
    summed. A tensor several consumers read alike moves once (`read_groups`: its gather
    keyed by the earliest of them, its error's reduction by the same one, the last in the
    backward pass). An inference (`forward_only`) has the forward stages alone
    (`node_layout.FORWARD_STAGES`)."""
    matrices: dict[StepKey, Moved] = {}
    known: dict[tuple, dict[str, Moved]] = {}  # the matrices of a shape, once (a block repeats)

    def add(key: StepKey, matrix: Moved) -> None:
        matrices[key] = matrices[key] + matrix if key in matrices else matrix

    outputs = set(graph.outputs)
    for i, (node, own) in enumerate(zip(graph.nodes, layouts, strict=True)):
        is_output = node.name in outputs
        shape = (own.shape_key, is_output)
        if shape not in known:
            known[shape] = node_layout.own_matrices(own, batch, word_bytes, is_output)
        for stage, matrix in known[shape].items():
            if not forward_only or stage in node_layout.FORWARD_STAGES:
                add((i, OWN_STAGES[stage]), matrix)
    generation = graph.generation_of()
    for edges in read_groups(graph, layouts):
        p, c, k = edges[0]
        reader = min((c for _, c, _ in edges), key=lambda i: (generation[i], i))
        shape = (layouts[p].shape_key, layouts[c].shape_key, k)
        if shape not in known:
            known[shape] = node_layout.edge_matrices(layouts[p], layouts[c], k, batch,
                                                     word_bytes)
        for stage, matrix in known[shape].items():
            if forward_only and stage not in node_layout.FORWARD_STAGES:
                continue
            kind, by_producer = EDGE_STAGES[stage]
            add((p if by_producer else reader, kind), matrix)
    return matrices


def training_matrices(graph: Graph, matrices: Mapping[StepKey, Moved], training: Training
                      ) -> dict[StepKey, Moved]:
    """The steps as the training options move them (`planner.training`): under ZeRO 1 and 2
    the reduced shards are updated where they are and the updated weights gathered to every
    copy after the update (the bytes of the gradients' gather, moved past the update); under
    ZeRO 3 a node's weights are gathered before its forward and again before its backward
    pass and the gradients stay reduce-scattered (ZeRO section 7.2: 1.5 times data
    parallelism's bytes); a recomputed node's forward steps (its input's gather, its
    partial outputs' reduction) are sent again in the backward pass."""
    out = dict(matrices)
    if training.zero:
        for (i, kind), matrix in matrices.items():
            if kind is TransferKind.GRADIENT_GATHER:
                del out[(i, kind)]
                again = (TransferKind.UPDATE_GATHER,) if training.zero < 3 else \
                    (TransferKind.WEIGHT_GATHER, TransferKind.WEIGHT_REGATHER)
                out.update({(i, k): matrix for k in again})
    for i in sorted(recompute_plan(graph, training.recompute).recomputed):
        for kind, again in ((TransferKind.RELAYOUT_FEATURE, TransferKind.RECOMPUTE_FEATURE),
                            (TransferKind.PARTIAL_SUM, TransferKind.RECOMPUTE_SUM)):
            if (i, kind) in matrices:
                out[(i, again)] = matrices[(i, kind)]
    return out


#: Bytes a row of the plan's messages (a message, or a ring's rounds from one member) holds
#: through routing and timing in either engine's process (measured on vgg_a at batch 4096:
#: 2,433,792 rows on 1,024 accelerators, the analytic engine's process 1.64 GB against 75 MB
#: for planning alone: 645 B a row; 48,826,624 rows on 4,096, 24.4 GB: 490 B a row).
ROW_BYTES = 650
MESSAGES_ADVICE = ("use --traffic-model layout_levels (a round per level, far fewer messages), "
                   "fewer accelerators or a smaller batch")


def sent(matrices: Mapping[StepKey, Moved], buckets: Sequence[Sequence[int]] = (),
         collective: str = "ring", hierarchy: Hierarchy | None = None
         ) -> dict[StepKey, Transfers]:
    """The steps' matrices as messages of the `collective` (a ring by default; `levels`
    needs the `hierarchy`), in step order. The gradient steps of the nodes of each of
    `buckets` are fused into one, keyed by the bucket's last node: the same bytes in fewer,
    larger messages (`matrices` itself is left as it is)."""
    fused = dict(matrices)
    for bucket in buckets:
        for kind in (TransferKind.GRADIENT, TransferKind.GRADIENT_GATHER,
                     TransferKind.UPDATE_GATHER):
            parts = [fused.pop((i, kind)) for i in bucket if (i, kind) in fused]
            if parts:
                fused[(bucket[-1], kind)] = sum(parts[1:], parts[0])
    order = list(TransferKind)
    steps = {}
    held = 0
    known: dict[tuple, Transfers] = {}  # equal matrices' (a repeated block's), once
    for key, matrix in sorted(fused.items(),
                              key=lambda item: (item[0][0], order.index(item[0][1]))):
        content = (_content(matrix), key[1].reduces)
        if content not in known:
            known[content] = COLLECTIVES[collective](matrix, hierarchy, key[1].reduces)
        transfers = known[content]
        if len(transfers):
            steps[key] = transfers
            held += len(transfers)
            check_memory(held * ROW_BYTES, f"the plan's messages ({held:,} rows so far, "
                         f"{matrix.members:,} members)", MESSAGES_ADVICE)
    return steps


def _content(matrix: Moved) -> tuple:
    """What a collective's messages depend on: the matrix's entries and groups, as bytes
    (a network's repeated blocks give equal matrices that are different objects)."""
    return (matrix.members, matrix.src.tobytes(), matrix.dst.tobytes(),
            matrix.amount.tobytes(), tuple((block.members.tobytes(), block.amount)
                                           for block in matrix.blocks))


def graph_layouts(graph: Graph, batch: int, hierarchy: Hierarchy, columns: Sequence[Column],
                  model: TrafficModel | None = None) -> list[node_layout.NodeLayout]:
    """Every node's layout under its column, as `model` (default: `layout`) lays it out;
    nodes of one `NodeLayout.shape_key` (a network's repeated blocks) compute their
    members' regions once (`NodeLayout.sharing`)."""
    model = model or TRAFFIC_MODELS["layout"]
    layouts, seen = [], {}
    for site, column in zip(graph_sites(graph), columns, strict=True):
        layout = model.node_layout(site, batch, column, hierarchy)
        twin = seen.setdefault(layout.shape_key, layout)
        layouts.append(layout.sharing(twin) if twin is not layout else layout)
    return layouts
