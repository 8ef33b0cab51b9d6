"""Plans of graph networks: a column of kinds for every node, and the bytes it moves.

The costs are the `layout` model's on graphs (`partition.graph_layout`);
the searches are HyPar's generalised to graphs: `greedy` decides level by
level from the top, each level exactly over the whole graph (min-sum
variable elimination in topological order, `graph_dp`); `joint` decides all
levels at once, exactly, where the graph's state space allows. Fixed
strategies: `data` (batch everywhere), `model` (in wherever a node can take
it, else batch).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from hypar_sim.errors import InputError
from hypar_sim.hardware.config import HardwareConfig
from hypar_sim.partition import graph_layout
from hypar_sim.partition.collectives import COLLECTIVES, Transfers, level_bytes
from hypar_sim.partition.graph_axes import Site
from hypar_sim.partition.graph_axes import sites as graph_sites
from hypar_sim.partition.graph_ops import NODE_OPS
from hypar_sim.partition.hierarchy import Hierarchy
from hypar_sim.partition.kinds import BATCH, DEFAULT_KINDS, IN
from hypar_sim.partition.redistribute import Moved
from hypar_sim.partition.shares import Column
from hypar_sim.partition.steps import StepMessages, TransferKind
from hypar_sim.planner.graph_dp import Factor, minimise_or_search
from hypar_sim.planner.strategies import STRATEGIES, PlanOptions
from hypar_sim.registry import LazyRegistry
from hypar_sim.workload.graph import Graph, Node


@dataclass(frozen=True)
class GraphRequest:
    """What a graph strategy plans: the graph, its sites (`partition.graph_axes`), the array,
    the kinds allowed, the search asked for, and the layout model's costs."""

    graph: Graph
    sites: Sequence[Site]
    batch: int
    hierarchy: Hierarchy
    kinds: tuple[str, ...]
    search: str
    costs: graph_layout.Costs
    notes: list[str]  # what the search had to give up (printed beside the plan)
    word_bytes: int = 4
    capacity_bytes: float | None = None  # one cube's memory (None: unlimited)
    config: HardwareConfig | None = None  # the hardware (planners with a cost model read it)


GraphColumns = Callable[[GraphRequest], list[Column]]

#: Graph strategies by name (the command line's choices for graphs come from it).
GRAPH_STRATEGIES: LazyRegistry[GraphColumns] = LazyRegistry({
    name: f"hypar_sim.planner.{name}_graph" for name in ("accpar", "grid", "tofu")})


def register_graph_strategy(name: str) -> Callable[[GraphColumns], GraphColumns]:
    """Add a strategy for graph networks (a chain strategy of the same name is in
    `planner.strategies`)."""
    def add(function: GraphColumns) -> GraphColumns:
        GRAPH_STRATEGIES[name] = function
        return function
    return add


@dataclass(frozen=True)
class GraphPlan:
    """Every node's column of kinds and the bytes the plan moves (both passes, loss and
    weight gradients included)."""

    network: str
    strategy: str
    search: str
    batch: int
    hierarchy: Hierarchy
    node_names: tuple[str, ...]
    columns: tuple[Column, ...]
    node_bytes: tuple[float, ...]  # the steps keyed to it (see `graph_steps`)
    traffic_bytes_per_level: tuple[float, ...]
    word_bytes: int = 4

    @property
    def traffic_bytes(self) -> float:
        return float(sum(self.node_bytes))

    @property
    def accelerators(self) -> int:
        return self.hierarchy.members

    def to_dict(self) -> dict[str, Any]:
        return {"network": self.network, "strategy": self.strategy, "search": self.search,
                "batch": self.batch, "hierarchy": list(self.hierarchy.sizes),
                "accelerators": self.accelerators, "traffic_model": "layout",
                "traffic_bytes": self.traffic_bytes,
                "traffic_bytes_per_level": list(self.traffic_bytes_per_level),
                "nodes": [{"name": name, "kinds": list(column), "bytes": moved}
                          for name, column, moved in zip(self.node_names, self.columns,
                                                         self.node_bytes, strict=True)]}


def graph_edges(graph: Graph) -> list[tuple[int, int, int]]:
    """(producer, consumer, input index) between nodes (graph inputs cost nothing)."""
    index = {node.name: i for i, node in enumerate(graph.nodes)}
    return [(index[source], j, k) for j, node in enumerate(graph.nodes)
            for k, source in enumerate(node.inputs) if source in index]


def _solve(graph: Graph, sites: Sequence[Site], options: Sequence[Sequence[Column]],
           hierarchy: Hierarchy, costs: graph_layout.Costs, notes: list[str],
           approximate: bool = True) -> list[Column]:
    """The cheapest option of every node: exact over the graph, or (`approximate`, where
    the graph is too entangled for that) a local search, noted in `notes`."""
    outputs = set(graph.outputs)
    factors = [Factor((i,), np.array([costs.own(site, column, hierarchy,
                                                site.node.name in outputs)
                                      for column in options[i]]))
               for i, site in enumerate(sites)]
    for p, c, k in graph_edges(graph):
        table = np.array([[costs.edge(sites[p], sites[c], k, a, b, hierarchy)
                           for b in options[c]] for a in options[p]])
        factors.append(Factor((p, c), table))
    choice = minimise_or_search([len(o) for o in options], factors, range(len(graph.nodes)),
                                notes, approximate)
    return [opts[i] for opts, i in zip(options, choice, strict=True)]


def _no_option(node: Node, kinds: Sequence[str], hierarchy: Hierarchy) -> InputError:
    return InputError(f"--kinds: no kind of {','.join(kinds)} can split node {node.name} "
                      f"({node.op}, output {list(node.shape)}) on hierarchy {hierarchy}; allowed: "
                      "kinds whose dimension has at least as many indices as a level has members")


def _greedy(graph: Graph, sites: Sequence[Site], batch: int, hierarchy: Hierarchy,
            kinds: Sequence[str], costs: graph_layout.Costs, notes: list[str]) -> list[Column]:
    columns: list[Column] = [() for _ in sites]
    for level in range(hierarchy.levels):
        upper = Hierarchy(hierarchy.sizes[:level + 1])
        options = []
        for site, prefix in zip(sites, columns, strict=True):
            offered = [prefix + (k,) for k in kinds
                       if graph_layout.offered(site, batch, prefix + (k,), upper)]
            if not offered:
                raise _no_option(site.node, kinds, upper)
            options.append(offered)
        columns = _solve(graph, sites, options, upper, costs, notes)
    return columns


def _joint(graph: Graph, sites: Sequence[Site], batch: int, hierarchy: Hierarchy,
           kinds: Sequence[str], costs: graph_layout.Costs, notes: list[str]) -> list[Column]:
    options = []
    for site in sites:
        offered = [c for c in itertools.product(kinds, repeat=hierarchy.levels)
                   if graph_layout.offered(site, batch, c, hierarchy)]
        if not offered:
            raise _no_option(site.node, kinds, hierarchy)
        options.append(offered)
    return _solve(graph, sites, options, hierarchy, costs, notes, approximate=False)


def _fixed(sites: Sequence[Site], batch: int, hierarchy: Hierarchy,
           preferred: str) -> list[Column]:
    columns = []
    for site in sites:
        column: Column = ()
        for level in range(hierarchy.levels):
            upper = Hierarchy(hierarchy.sizes[:level + 1])
            for kind in (preferred, BATCH):
                if graph_layout.offered(site, batch, column + (kind,), upper):
                    column += (kind,)
                    break
            else:
                raise _no_option(site.node, (preferred, BATCH), upper)
        columns.append(column)
    return columns


@register_graph_strategy("hypar")
def _hypar(request: GraphRequest) -> list[Column]:
    find = _joint if request.search == "joint" else _greedy
    return find(request.graph, request.sites, request.batch, request.hierarchy, request.kinds,
                request.costs, request.notes)


@register_graph_strategy("data")
def _data(request: GraphRequest) -> list[Column]:
    return _fixed(request.sites, request.batch, request.hierarchy, BATCH)


@register_graph_strategy("model")
def _model(request: GraphRequest) -> list[Column]:
    return _fixed(request.sites, request.batch, request.hierarchy, IN)


def plan_graph(graph: Graph, strategy: str, hierarchy: Hierarchy, batch: int,
               kinds: Sequence[str] = DEFAULT_KINDS, search: str = "greedy",
               word_bytes: int = 4, config: HardwareConfig | None = None) -> GraphPlan:
    """The plan of `strategy` for `graph` on `hierarchy`, with its traffic."""
    if strategy not in GRAPH_STRATEGIES:
        raise InputError(f"--strategy: graph networks take {', '.join(GRAPH_STRATEGIES)} so far, "
                         f"got {strategy}")
    for node in graph.nodes:
        if node.op not in NODE_OPS:
            raise InputError(f"{graph.name}: node {node.name} is a {node.op}; graph planning "
                             f"takes {', '.join(NODE_OPS)}")
    notes: list[str] = []
    request = GraphRequest(graph, graph_sites(graph), batch, hierarchy, tuple(kinds), search,
                           graph_layout.Costs(batch, word_bytes), notes, word_bytes,
                           float(config.cube_capacity_bytes) if config else None, config)
    columns = GRAPH_STRATEGIES[strategy](request)
    chain = STRATEGIES.get(strategy)
    search = search if chain is not None and chain.honours_search else ""
    if notes:
        search = f"{search} ({notes[0]})"
    return evaluate_graph_plan(graph, strategy, search, batch, hierarchy, columns, word_bytes)


def make_graph_plan(graph: Graph, strategy: str, hierarchy: Hierarchy, batch: int,
                    plan_text: str | None = None, word_bytes: int = 4,
                    options: PlanOptions | None = None,
                    config: HardwareConfig | None = None) -> GraphPlan:
    """`make_plan` for a graph: the same options (kinds, search; the layout model only);
    `config` gives the strategies with a cost model or a memory limit their hardware."""
    options = options or PlanOptions()
    if options.traffic_model != "layout":
        raise InputError("--traffic-model: graph networks are planned with the layout model "
                         "only (paper's reading covers chains of conv and fc layers)")
    if plan_text is not None:
        raise InputError("--plan: explicit plans take chain networks so far")
    if options.objective != "bytes":
        raise InputError(f"--objective: {options.objective} takes chain networks so far; "
                         "graph networks are planned for bytes (allowed: bytes)")
    if options.phases != "training":
        raise InputError(f"--phases: {options.phases} takes chain networks so far; graph "
                         f"networks ({graph.name}) simulate a training step (allowed: training)")
    kinds = options.kinds
    chain = STRATEGIES.get(strategy)
    if not options.kinds_given and chain is not None and chain.default_kinds:
        kinds = chain.default_kinds  # its paper's kinds, as on a chain
    return plan_graph(graph, strategy, hierarchy, batch, kinds, options.search, word_bytes,
                      config)


#: The step each stage of an edge, a gradient or the loss goes into, keyed like a chain's:
#: an edge's forward reduce by its producer, its forward gather by its consumer, its
#: backward reduce by the consumer, its backward gather by the producer.
_EDGE_STAGES = {"forward reduce": (TransferKind.PARTIAL_SUM, True),
                "forward gather": (TransferKind.RELAYOUT_FEATURE, False),
                "backward reduce": (TransferKind.ERROR_REDUCE, False),
                "backward gather": (TransferKind.ERROR_GATHER, True)}
_OWN_STAGES = {"gradient reduce": TransferKind.GRADIENT, "vector reduce": TransferKind.GRADIENT,
               "gradient gather": TransferKind.GRADIENT_GATHER,
               "vector gather": TransferKind.GRADIENT_GATHER,
               "loss reduce": TransferKind.PARTIAL_SUM, "loss gather": TransferKind.ERROR_GATHER}

StepKey = tuple[int, TransferKind]


def graph_steps(graph: Graph, layouts: Sequence[graph_layout.NodeLayout], batch: int,
                hierarchy: Hierarchy, word_bytes: int,
                buckets: Sequence[Sequence[int]] = ()) -> dict[StepKey, StepMessages]:
    """Every message of a plan, by step (see `graph_transfers`)."""
    return {key: transfers.messages(key[0], key[1], hierarchy) for key, transfers in
            graph_transfers(graph, layouts, batch, word_bytes, buckets).items()}


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


def graph_transfers(graph: Graph, layouts: Sequence[graph_layout.NodeLayout], batch: int,
                    word_bytes: int, buckets: Sequence[Sequence[int]] = ()) -> dict[
                        StepKey, Transfers]:
    """Every transfer of a plan, by step (node index, why): the stages' matrices summed per
    step and sent by the `ring` collective (the planner's and the simulator's bytes). The
    gradient steps of the nodes of each of `buckets` are fused into one, keyed by the
    bucket's last node: the same bytes in fewer, larger messages."""
    matrices: dict[StepKey, Moved] = {}

    def add(key: StepKey, matrix: Moved) -> None:
        matrices[key] = matrices[key] + matrix if key in matrices else matrix

    outputs = set(graph.outputs)
    for i, (node, own) in enumerate(zip(graph.nodes, layouts, strict=True)):
        for stage, matrix in graph_layout.own_matrices(own, batch, word_bytes,
                                                       node.name in outputs).items():
            add((i, _OWN_STAGES[stage]), matrix)
    for p, c, k in graph_edges(graph):
        for stage, matrix in graph_layout.edge_matrices(layouts[p], layouts[c], k, batch,
                                                        word_bytes).items():
            kind, by_producer = _EDGE_STAGES[stage]
            add((p if by_producer else c, kind), matrix)
    for bucket in buckets:
        for kind in (TransferKind.GRADIENT, TransferKind.GRADIENT_GATHER):
            parts = [matrices.pop((i, kind)) for i in bucket if (i, kind) in matrices]
            if parts:
                matrices[(bucket[-1], kind)] = sum(parts[1:], parts[0])
    order = list(TransferKind)
    steps = {}
    for key, matrix in sorted(matrices.items(),
                              key=lambda item: (item[0][0], order.index(item[0][1]))):
        transfers = COLLECTIVES["ring"](matrix)
        if len(transfers):
            steps[key] = transfers
    return steps


def graph_layouts(graph: Graph, batch: int, hierarchy: Hierarchy,
                  columns: Sequence[Column]) -> list[graph_layout.NodeLayout]:
    return [graph_layout.layout(site, batch, column, hierarchy)
            for site, column in zip(graph_sites(graph), columns, strict=True)]


def evaluate_graph_plan(graph: Graph, strategy: str, search: str, batch: int,
                        hierarchy: Hierarchy, columns: Sequence[Column],
                        word_bytes: int = 4) -> GraphPlan:
    """Bytes per node (the steps keyed to it) and per level (the top-most level at which
    sender and receiver differ) of a fixed plan, from its messages."""
    steps = graph_transfers(graph, graph_layouts(graph, batch, hierarchy, columns), batch,
                            word_bytes)
    per_node = [0.0] * len(graph.nodes)
    per_level = np.zeros(hierarchy.levels)
    for (index, _), transfers in steps.items():
        per_node[index] += float(transfers.bytes.sum())
        per_level += level_bytes(transfers, hierarchy)
    return GraphPlan(graph.name, strategy, search, batch, hierarchy,
                     tuple(n.name for n in graph.nodes), tuple(columns), tuple(per_node),
                     tuple(float(b) for b in per_level), word_bytes)
