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

import dataclasses
import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from hypar_sim.errors import InputError, closest
from hypar_sim.hardware.config import HardwareConfig
from hypar_sim.partition import graph_layout
from hypar_sim.partition.collectives import level_bytes
from hypar_sim.partition.graph_axes import Site
from hypar_sim.partition.graph_axes import sites as graph_sites
from hypar_sim.partition.hierarchy import Hierarchy
from hypar_sim.partition.kinds import BATCH, DEFAULT_KINDS, IN, KINDS
from hypar_sim.partition.shares import Column
from hypar_sim.planner import memory
from hypar_sim.planner.graph_dp import Factor, every_assignment, minimise_or_search
from hypar_sim.planner.objectives import OBJECTIVES
from hypar_sim.planner.plan_messages import (
    graph_edges,
    graph_layouts,
    graph_transfers,
    shared_cost,
    shared_table,
    sharing_edges,
)
from hypar_sim.planner.plan_text import read_node_plan
from hypar_sim.planner.search import MAX_BRUTE_FORCE_PLANS
from hypar_sim.planner.strategies import (
    STRATEGIES,
    TRAINING_PLAN,
    PlanOptions,
    check_objective_of,
    graph_strategies,
    register_graph_columns,
)
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
    memory_price: float = 0.0  # added per byte of a node's footprint (planner.memory)
    plan_text: str | None = None  # the user's plan (explicit)
    progress: bool = False  # a bar on stderr for a long search (exhaustive)


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
    phases: str = "training"  # or "forward": an inference, the forward pass alone
    #: The busiest cube's memory, bytes: weights, gradients, activations (kept outputs) and
    #: buffers (the most it receives in one step of the plan's messages).
    footprint_parts: tuple[tuple[str, float], ...] = ()
    objective: str = "bytes"  # what the search minimised
    estimate: float = 0.0  # its value for this plan: bytes, cycles or pJ (planner.timed_costs)

    @property
    def footprint_bytes(self) -> float:
        """The busiest cube's peak memory: the sum of `footprint_parts`."""
        return float(sum(part for _, part in self.footprint_parts))

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
                "objective": self.objective, "estimate": self.estimate,
                "traffic_bytes": self.traffic_bytes,
                "traffic_bytes_per_level": list(self.traffic_bytes_per_level),
                "footprint_bytes": self.footprint_bytes,
                "footprint_parts_bytes": dict(self.footprint_parts), "phases": self.phases,
                "nodes": [{"name": name, "kinds": list(column), "bytes": moved}
                          for name, column, moved in zip(self.node_names, self.columns,
                                                         self.node_bytes, strict=True)]}


#: Most cells of one table over a tensor's producer and its consumers (some may read it
#: alike: one transfer serves them); beyond that, each edge is costed as if alone, and the
#: plan's bytes, counted on its messages, may be less than the search thought.
_SHARED_CELLS = 2**16


def _solve(graph: Graph, sites: Sequence[Site], options: Sequence[Sequence[Column]],
           hierarchy: Hierarchy, costs: graph_layout.Costs, notes: list[str],
           approximate: bool = True, price: float = 0.0, members: int = 1) -> list[Column]:
    """The cheapest option of every node: exact over the graph, or (`approximate`, where
    the graph is too entangled for that) a local search, noted in `notes` (`_factors`)."""
    factors = _factors(graph, sites, options, hierarchy, costs, price, members)
    choice = minimise_or_search([len(o) for o in options], factors, range(len(graph.nodes)),
                                notes, approximate)
    return [opts[i] for opts, i in zip(options, choice, strict=True)]


def _factors(graph: Graph, sites: Sequence[Site], options: Sequence[Sequence[Column]],
             hierarchy: Hierarchy, costs: graph_layout.Costs, price: float = 0.0,
             members: int = 1) -> list[Factor]:
    """The cost tables of a plan over every node's `options`: each node's own, each group
    of consumers that may read a tensor alike (or each edge alone). With a `price` per
    byte, a node's own cost adds its footprint's (on the top levels of an array of
    `members`, the greedy search's, a group's footprint spread over its members)."""
    outputs = set(graph.outputs)
    spread = max(members, hierarchy.members) / hierarchy.members
    factors = [Factor((i,), np.array([costs.own(site, column, hierarchy,
                                                site.node.name in outputs)
                                      + (price * costs.footprint(site, column, hierarchy)
                                         / spread if price else 0.0)
                                      for column in options[i]]))
               for i, site in enumerate(sites)]
    for edges in sharing_edges(graph):
        nodes = tuple(dict.fromkeys([edges[0][0], *(c for _, c, _ in edges)]))
        cells = math.prod(len(options[n]) for n in nodes)
        if len(edges) > 1 and cells <= _SHARED_CELLS:
            nodes, table = shared_table(costs, sites, edges, options, hierarchy)
            factors.append(Factor(nodes, np.array(table).reshape(
                [len(options[n]) for n in nodes])))
            continue
        for p, c, k in edges:  # alone, or too many together: each edge as if alone
            table = np.array([[costs.edge(sites[p], sites[c], k, a, b, hierarchy)
                               for b in options[c]] for a in options[p]])
            factors.append(Factor((p, c), table))
    return factors


def _no_option(node: Node, kinds: Sequence[str], hierarchy: Hierarchy) -> InputError:
    return InputError(f"--kinds: no kind of {','.join(dict.fromkeys(kinds))} can split node "
                      f"{node.name} "
                      f"({node.op}, output {list(node.shape)}) on hierarchy {hierarchy}; allowed: "
                      "kinds whose dimension has at least as many indices as a level has members")


def _greedy(graph: Graph, sites: Sequence[Site], batch: int, hierarchy: Hierarchy,
            kinds: Sequence[str], costs: graph_layout.Costs, notes: list[str],
            price: float = 0.0) -> list[Column]:
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
        columns = _solve(graph, sites, options, upper, costs, notes, price=price,
                         members=hierarchy.members)
    return columns


def _offered_columns(sites: Sequence[Site], batch: int, hierarchy: Hierarchy,
                     kinds: Sequence[str]) -> list[list[Column]]:
    """Every node's columns of `kinds` over all levels (one line if a node has none)."""
    options = []
    for site in sites:
        offered = [c for c in itertools.product(kinds, repeat=hierarchy.levels)
                   if graph_layout.offered(site, batch, c, hierarchy)]
        if not offered:
            raise _no_option(site.node, kinds, hierarchy)
        options.append(offered)
    return options


#: Most cost-table cells an exact search over all levels at once may fill (each a costed
#: redistribution between two columns, about 0.3 ms: resnet18's 79k on 4 accelerators take
#: 25 s): beyond it the search is refused in one line rather than left running for hours.
MAX_TABLE_CELLS = 2**17


def _joint(graph: Graph, sites: Sequence[Site], batch: int, hierarchy: Hierarchy,
           kinds: Sequence[str], costs: graph_layout.Costs, notes: list[str],
           price: float = 0.0, strategy: str = "hypar --search joint") -> list[Column]:
    """The exact plan over all levels at once (every node's columns of `kinds`)."""
    options = _offered_columns(sites, batch, hierarchy, kinds)
    cells = sum(len(options[p]) * len(options[c]) for p, c, _ in graph_edges(graph))
    if cells > MAX_TABLE_CELLS:
        widest = max(len(o) for o in options)
        raise InputError(
            f"--strategy: {strategy} on {graph.name} costs {cells:,} pairs of columns (up to "
            f"{widest:,} columns of kinds {','.join(kinds)} per node over {hierarchy.levels} "
            f"levels), more than {MAX_TABLE_CELLS:,}; use fewer --kinds, fewer levels "
            "(--accelerators) or hypar (level by level)")
    return _solve(graph, sites, options, hierarchy, costs, notes, approximate=False,
                  price=price)


def _fixed(sites: Sequence[Site], batch: int, hierarchy: Hierarchy,
           preferred: Callable[[Node], str]) -> list[Column]:
    """Every node the kind `preferred` picks for it at every level, batch where it cannot
    take that kind."""
    columns = []
    for site in sites:
        column: Column = ()
        for level in range(hierarchy.levels):
            upper = Hierarchy(hierarchy.sizes[:level + 1])
            for kind in (preferred(site.node), BATCH):
                if graph_layout.offered(site, batch, column + (kind,), upper):
                    column += (kind,)
                    break
            else:
                raise _no_option(site.node, (preferred(site.node), BATCH), upper)
        columns.append(column)
    return columns


@register_graph_columns("hypar")
def _hypar(request: GraphRequest) -> list[Column]:
    find = _joint if request.search == "joint" else _greedy
    return find(request.graph, request.sites, request.batch, request.hierarchy, request.kinds,
                request.costs, request.notes, request.memory_price)


@register_graph_columns("optimal")
def _optimal(request: GraphRequest) -> list[Column]:
    """The exact least-bytes plan over all levels and every allowed kind (`_joint`)."""
    return _joint(request.graph, request.sites, request.batch, request.hierarchy,
                  request.kinds, request.costs, request.notes, request.memory_price, "optimal")


@register_graph_columns("exhaustive")
def _exhaustive(request: GraphRequest) -> list[Column]:
    """Every plan of the allowed kinds tried (`graph_dp.every_assignment`)."""
    options = _offered_columns(request.sites, request.batch, request.hierarchy, request.kinds)
    count = math.prod(len(o) for o in options)
    if count > MAX_BRUTE_FORCE_PLANS:
        raise InputError(f"--strategy exhaustive: {count:,} plans of {request.graph.name} to "
                         f"try, more than {MAX_BRUTE_FORCE_PLANS:,}; use a smaller network, fewer "
                         "levels or kinds, or optimal (the same minimum, by elimination)")
    factors = _factors(request.graph, request.sites, options, request.hierarchy, request.costs,
                       request.memory_price)
    choice = every_assignment([len(o) for o in options], factors, request.progress)[1]
    return [opts[i] for opts, i in zip(options, choice, strict=True)]


@register_graph_columns("explicit")
def _explicit(request: GraphRequest) -> list[Column]:
    names = [site.node.name for site in request.sites]
    columns = read_node_plan(request.plan_text or "", names, request.hierarchy.levels)
    for site, column in zip(request.sites, columns, strict=True):
        if not graph_layout.offered(site, request.batch, column, request.hierarchy):
            raise InputError(
                f"--plan: node {site.node.name} ({site.node.op}, output {list(site.node.shape)}) "
                f"cannot take ({' '.join(column)}) on hierarchy {request.hierarchy} with batch "
                f"{request.batch}: a kind splits a dimension into more parts than it has, or "
                "one the node does not have")
    return columns


@register_graph_columns("data")
def _data(request: GraphRequest) -> list[Column]:
    return _fixed(request.sites, request.batch, request.hierarchy, lambda node: BATCH)


@register_graph_columns("model")
def _model(request: GraphRequest) -> list[Column]:
    return _fixed(request.sites, request.batch, request.hierarchy, lambda node: IN)


@register_graph_columns("trick")
def _trick(request: GraphRequest) -> list[Column]:
    """Krizhevsky's "one weird trick" (arXiv:1404.5997) on a graph: fully-connected nodes
    (weighted multiply-accumulates without a window) split their input channels (mp), every
    other node the batch (dp)."""
    def kind(node: Node) -> str:
        desc = node.desc
        fc = desc is not None and desc.weights is not None and desc.channel is not None \
            and not desc.window
        return IN if fc else BATCH
    return _fixed(request.sites, request.batch, request.hierarchy, kind)


def plan_graph(graph: Graph, strategy: str, hierarchy: Hierarchy, batch: int,
               kinds: Sequence[str] = DEFAULT_KINDS, search: str = "greedy",
               word_bytes: int = 4, config: HardwareConfig | None = None,
               plan_text: str | None = None, phases: str = "training",
               objective: str = "bytes", topology: str = "htree",
               progress: bool = False) -> GraphPlan:
    """The plan of `strategy` for `graph` on `hierarchy`, with its traffic (of a training
    step, or with `phases` "forward" of an inference), searched for the least bytes, or
    step time or energy on `topology` (`planner.timed_costs`)."""
    spec = STRATEGIES.get(strategy)
    if spec is None or spec.graph is None:
        raise InputError(f"strategy: unknown '{strategy}'{closest(strategy, STRATEGIES)}; "
                         f"allowed: {', '.join(graph_strategies())}")
    if (strategy == "explicit") != (plan_text is not None):
        raise InputError("plan: give --plan exactly when the strategy is 'explicit'")
    notes: list[str] = []
    costs = graph_layout.Costs(batch, word_bytes, phases == "forward")
    if objective != "bytes":
        costs = _timed_costs(graph, batch, hierarchy, word_bytes, phases, objective, topology,
                             config)
    request = GraphRequest(graph, graph_sites(graph), batch, hierarchy, tuple(kinds), search,
                           costs, notes, word_bytes,
                           float(config.cube_capacity_bytes) if config else None, config,
                           plan_text=plan_text, progress=progress)
    plan = _fitting(request, strategy, spec.graph(request), phases)
    search = search if spec.honours_search else ""
    if phases == "forward" and spec.own_cost:
        search = TRAINING_PLAN  # its paper costs a training step: its plan, run forward
    if notes:
        search = f"{search} ({notes[0]})"
    estimate = plan.traffic_bytes if objective == "bytes" else \
        _plan_cost(request, plan.columns)
    return dataclasses.replace(plan, search=search, objective=objective, estimate=estimate)


def _timed_costs(graph: Graph, batch: int, hierarchy: Hierarchy, word_bytes: int,
                 phases: str, objective: str, topology: str,
                 config: HardwareConfig | None) -> graph_layout.Costs:
    """The cost tables in cycles or pJ on the topology (`planner.timed_costs`)."""
    from hypar_sim.hardware.config import load_hardware
    from hypar_sim.hardware.topology import make_topology
    from hypar_sim.planner.timed_costs import TimedCosts, fed_nodes

    config = config or load_hardware(overrides={"word_bytes": word_bytes})
    return TimedCosts(batch, word_bytes, phases == "forward", objective, config,
                      make_topology(topology, config, hierarchy),
                      fed_nodes(graph.nodes, graph_edges(graph)))


def _fitting(request: GraphRequest, strategy: str, columns: list[Column],
             phases: str) -> GraphPlan:
    """The plan of `columns`, if it fits a cube (`GraphPlan.footprint_parts`: the busiest
    cube's weights, gradients, kept outputs and largest receive); else, for a strategy that
    searches on the planner's costs (hypar), of its search again with a price on memory, the
    least price at which the plan fits; else one line with the need and the capacity."""
    capacity = request.capacity_bytes or math.inf
    costs, sites, hierarchy = request.costs, request.sites, request.hierarchy
    evaluated: dict[tuple[Column, ...], GraphPlan] = {}

    def evaluate(found: Sequence[Column]) -> GraphPlan:
        key = tuple(found)
        if key not in evaluated:
            evaluated[key] = evaluate_graph_plan(request.graph, strategy, "", request.batch,
                                                 hierarchy, found, request.word_bytes, phases)
        return evaluated[key]

    def footprint_of(found: Sequence[Column]) -> float:
        return evaluate(found).footprint_bytes

    needed = footprint_of(columns)
    if needed <= capacity:
        return evaluate(columns)
    spec = STRATEGIES[strategy]
    options = _offered_columns(sites, request.batch, hierarchy, request.kinds)
    least = sum(min(costs.footprint(site, column, hierarchy, member=0) for column in offered)
                for site, offered in zip(sites, options, strict=True))  # member 0's least
    fitters = [name for name in graph_strategies() if STRATEGIES[name].objectives == OBJECTIVES]
    if least > capacity or spec.objectives != OBJECTIVES:
        raise memory.too_big(request.graph.name, strategy, needed, least, capacity,
                             request.kinds, fitters)

    def solve(price: float) -> memory.Solution:
        found = spec.graph(dataclasses.replace(request, memory_price=price))
        return _plan_cost(request, found), found

    scale = max(_plan_cost(request, columns), 1.0) / capacity
    fitted, least = memory.fit(solve, footprint_of, capacity, scale)
    if fitted is None:  # the leanest footprints fit, not with the buffers of their plans
        raise memory.too_big(request.graph.name, strategy, needed, least, capacity,
                             request.kinds, fitters)
    return evaluate(fitted[1])


def _plan_cost(request: GraphRequest, columns: Sequence[Column]) -> float:
    """What a plan costs as the search sees it (the planner's cached costs: bytes of both
    passes, the loss and the gradients; or cycles or pJ)."""
    outputs = set(request.graph.outputs)
    costs, sites, hierarchy = request.costs, request.sites, request.hierarchy
    total = sum(costs.own(site, column, hierarchy, site.node.name in outputs)
                for site, column in zip(sites, columns, strict=True))
    return total + sum(shared_cost(costs, sites, edges, columns, hierarchy)
                       for edges in sharing_edges(request.graph))


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
    kinds = options.kinds
    chain = STRATEGIES.get(strategy)
    if chain is not None:
        check_objective_of(strategy, options.objective, graph_strategies())
    if not options.kinds_given and chain is not None and chain.default_kinds:
        # its paper's kinds, as on a chain; not `replicate`, unless named: a replicated node
        # moves no bytes, so a search for bytes would compute every node everywhere
        kinds = tuple(k for k in chain.default_kinds if KINDS[k].dim is not None)
    if plan_text is not None:
        strategy = "explicit"
    return plan_graph(graph, strategy, hierarchy, batch, kinds, options.search, word_bytes,
                      config, plan_text, options.phases, options.objective, options.topology,
                      options.progress)


def evaluate_graph_plan(graph: Graph, strategy: str, search: str, batch: int,
                        hierarchy: Hierarchy, columns: Sequence[Column],
                        word_bytes: int = 4, phases: str = "training") -> GraphPlan:
    """Bytes per node (the steps keyed to it) and per level (the top-most level at which
    sender and receiver differ) of a fixed plan, from its messages (`phases` "forward": an
    inference's)."""
    forward_only = phases == "forward"
    layouts = graph_layouts(graph, batch, hierarchy, columns)
    steps = graph_transfers(graph, layouts, batch, word_bytes, forward_only=forward_only)
    per_node = [0.0] * len(graph.nodes)
    per_level = np.zeros(hierarchy.levels)
    receive = 0.0
    for (index, _), transfers in steps.items():
        per_node[index] += float(transfers.bytes.sum())
        per_level += level_bytes(transfers, hierarchy)
        receive = max(receive, float(np.bincount(transfers.dst, transfers.bytes).max()))
    return GraphPlan(graph.name, strategy, search, batch, hierarchy,
                     tuple(n.name for n in graph.nodes), tuple(columns), tuple(per_node),
                     tuple(float(b) for b in per_level), word_bytes, phases,
                     footprint_parts(layouts, word_bytes, not forward_only, receive))


def footprint_parts(layouts: Sequence[graph_layout.NodeLayout], word_bytes: int,
                    gradients: bool, buffers: float) -> tuple[tuple[str, float], ...]:
    """The busiest cube's memory by part, bytes: its weights, its gradients (none in an
    inference), its kept outputs, and `buffers` (the simulator checks the same parts)."""
    if not layouts:
        return (("weights", 0.0), ("gradients", 0.0), ("activations", 0.0),
                ("buffers", buffers))
    params, kept = (float(part.sum()) * word_bytes
                    for part in graph_layout.busiest_member(layouts, gradients))
    return (("weights", params), ("gradients", params * gradients), ("activations", kept),
            ("buffers", buffers))
