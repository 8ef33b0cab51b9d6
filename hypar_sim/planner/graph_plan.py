"""Plans of graph networks: a column of kinds for every node, and the bytes it moves.

The costs are the `layout` model's on graphs (`partition.graph_layout`), in bytes or, for
time and energy, `planner.timed_costs`'; every strategy's graph columns (`Strategy.graph`:
the planner's own in `planner.own_strategies`, the seeds' in their modules) are planned here
within a cube's memory, and the plan evaluated on its messages.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from hypar_sim.errors import InputError, closest
from hypar_sim.hardware.config import HardwareConfig
from hypar_sim.partition import graph_layout
from hypar_sim.partition.collectives import level_bytes
from hypar_sim.partition.graph_axes import Site
from hypar_sim.partition.graph_axes import sites as graph_sites
from hypar_sim.partition.hierarchy import Hierarchy
from hypar_sim.partition.kinds import BATCH, DEFAULT_KINDS, KINDS
from hypar_sim.partition.redistribute import Moved
from hypar_sim.partition.shares import Column
from hypar_sim.partition.steps import TransferKind
from hypar_sim.planner import memory
from hypar_sim.planner.objectives import ESTIMATE_UNITS, OBJECTIVES
from hypar_sim.planner.options import PlanOptions
from hypar_sim.planner.plan_messages import (
    collective_of,
    fed_nodes,
    graph_layouts,
    graph_matrices,
    sent,
    shared_cost,
    sharing_edges,
)
from hypar_sim.planner.strategies import (
    STRATEGIES,
    TRAINING_PLAN,
    check_objective_of,
    graph_strategies,
)
from hypar_sim.planner.traffic import TRAFFIC_MODELS
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
    traffic_model: str = "layout"  # or layout_levels: the same bytes, sent level by level


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
    traffic_model: str = "layout"  # how its messages are sent (`planner.traffic` collective)
    #: What follows from the columns, for the schedule to read: every node's layout and the
    #: bytes [src, dst] of every step (`plan_messages.graph_matrices`).
    layouts: tuple[graph_layout.NodeLayout, ...] = field(default=(), compare=False, repr=False)
    matrices: Mapping[tuple[int, TransferKind], Moved] = field(default_factory=dict,
                                                                compare=False, repr=False)

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
                "accelerators": self.accelerators, "traffic_model": self.traffic_model,
                "objective": self.objective, "estimate": self.estimate,
                "estimate_unit": ESTIMATE_UNITS[self.objective],
                "traffic_bytes": self.traffic_bytes,
                "traffic_bytes_per_level": list(self.traffic_bytes_per_level),
                "footprint_bytes": self.footprint_bytes,
                "footprint_parts_bytes": dict(self.footprint_parts), "phases": self.phases,
                "levels": self.hierarchy.levels,
                "plan": [[column[h] for column in self.columns]  # [level][node], HyPar's rows
                         for h in range(self.hierarchy.levels)],
                "nodes": [{"name": name, "kinds": list(column), "bytes": moved}
                          for name, column, moved in zip(self.node_names, self.columns,
                                                         self.node_bytes, strict=True)]}


def no_option_error(node: Node, kinds: Sequence[str], hierarchy: Hierarchy,
                    batch: int | None = None) -> InputError:
    """One line: no kind of `kinds` splits `node` on `hierarchy` (the levels decided so
    far), with the batch to try where batch is among them."""
    hint = ""
    if BATCH in kinds and batch is not None and batch < hierarchy.members:
        hint = (f"; with batch {batch}, fewer samples than the {hierarchy.members} groups of "
                f"these levels: use a batch of at least {hierarchy.members}, fewer "
                "accelerators, or more kinds")
    return InputError(f"--kinds: no kind of {','.join(dict.fromkeys(kinds))} can split node "
                      f"{node.name} ({node.op}, output {list(node.shape)}) on the top "
                      f"{hierarchy.levels} level(s) ({hierarchy}) of the array; allowed: kinds "
                      f"whose dimension has at least as many indices as a level has members{hint}")


def offered_columns(sites: Sequence[Site], batch: int, hierarchy: Hierarchy,
                     kinds: Sequence[str]) -> list[list[Column]]:
    """Every node's columns of `kinds` over all levels (one line if a node has none)."""
    options = []
    for site in sites:
        offered = [c for c in itertools.product(kinds, repeat=hierarchy.levels)
                   if graph_layout.offered(site, batch, c, hierarchy)]
        if not offered:
            raise no_option_error(site.node, kinds, hierarchy, batch)
        options.append(offered)
    return options


def plan_graph(graph: Graph, strategy: str, hierarchy: Hierarchy, batch: int,
               kinds: Sequence[str] = DEFAULT_KINDS, search: str = "greedy",
               word_bytes: int = 4, config: HardwareConfig | None = None,
               plan_text: str | None = None, phases: str = "training",
               objective: str = "bytes", topology: str = "htree",
               progress: bool = False, traffic_model: str = "layout") -> GraphPlan:
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
                           plan_text=plan_text, progress=progress, traffic_model=traffic_model)
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
    from hypar_sim.planner.timed_costs import TimedCosts

    config = config or load_hardware(overrides={"word_bytes": word_bytes})
    return TimedCosts(batch, word_bytes, phases == "forward", objective, config,
                      make_topology(topology, config, hierarchy),
                      fed_nodes(graph))


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
                                                 hierarchy, found, request.word_bytes, phases,
                                                 request.traffic_model)
        return evaluated[key]

    def footprint_of(found: Sequence[Column]) -> float:
        return evaluate(found).footprint_bytes

    needed = footprint_of(columns)
    if needed <= capacity:
        return evaluate(columns)
    spec = STRATEGIES[strategy]
    options = offered_columns(sites, request.batch, hierarchy, request.kinds)
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
    """The plan of `strategy` for `graph` under the options (kinds, search, objective, phases;
    the layout models: `--traffic-model paper` plans a chain, `request.plan_request`);
    `config` gives the strategies with a cost model or a memory limit their hardware."""
    options = options or PlanOptions()
    if TRAFFIC_MODELS[options.traffic_model].chains_only:  # checked by PlanOptions
        takers = [name for name, model in TRAFFIC_MODELS.items() if not model.chains_only]
        raise InputError(f"--traffic-model: {options.traffic_model} reads chains of conv and fc "
                         f"layers only; graph networks take {', '.join(takers)}")
    kinds = options.kinds
    spec = STRATEGIES.get(strategy)  # None: plan_graph names the allowed ones
    if spec is not None:  # the takers are listed (their modules loaded) only on refusal
        check_objective_of(strategy, options.objective, STRATEGIES)
    unsplit = [k for k in kinds or () if KINDS[k].dim is None]  # replicate
    if options.kinds_given and spec is not None and spec.own_cost and unsplit:
        takers = [name for name, entry in dict.items(STRATEGIES) if not entry.own_cost
                  and entry.searches]
        raise InputError(f"--kinds: strategy {strategy} searches its paper's layouts, which "
                         f"have no kind like {unsplit[0]}; {', '.join(takers)} search it (or "
                         "name it in an explicit --plan)")
    if not options.kinds_given and spec is not None and spec.default_kinds:
        # its paper's kinds, as on a chain; not `replicate`, unless named: a replicated node
        # moves no bytes, so a search for bytes would compute every node everywhere
        kinds = tuple(k for k in spec.default_kinds if KINDS[k].dim is not None)
    if plan_text is not None:
        strategy = "explicit"
    if options.objective != "bytes":
        chained = _chain_estimated(graph, strategy, hierarchy, batch, word_bytes, options, config)
        if chained is not None:
            return chained
    return plan_graph(graph, strategy, hierarchy, batch, kinds, options.search, word_bytes,
                      config, plan_text, options.phases, options.objective, options.topology,
                      options.progress, options.traffic_model)


def _chain_estimated(graph: Graph, strategy: str, hierarchy: Hierarchy, batch: int,
                     word_bytes: int, options: PlanOptions,
                     config: HardwareConfig | None) -> GraphPlan | None:
    """A chain of conv and fc layers searched for time or energy by the chain's estimator
    (`planner.estimate`: closed forms per level, refined on the sent messages, far faster
    than timing every pair of columns), its plan evaluated as the graph's; None for any
    other graph."""
    from hypar_sim.planner.strategies import make_plan
    from hypar_sim.workload.network import chain_of

    try:
        chain = chain_of(graph, "objective")
    except InputError:
        return None
    plan = make_plan(chain, strategy, hierarchy, batch, None, word_bytes, options, config)
    found = evaluate_graph_plan(graph, strategy, plan.search, batch, hierarchy, plan.columns,
                                word_bytes, options.phases, options.traffic_model)
    return dataclasses.replace(found, objective=plan.objective, estimate=plan.estimate)


def evaluate_graph_plan(graph: Graph, strategy: str, search: str, batch: int,
                        hierarchy: Hierarchy, columns: Sequence[Column],
                        word_bytes: int = 4, phases: str = "training",
                        traffic_model: str = "layout") -> GraphPlan:
    """Bytes per node (the steps keyed to it) and per level (the top-most level at which
    sender and receiver differ) of a fixed plan, from its messages (`phases` "forward": an
    inference's; sent by `traffic_model`'s collective)."""
    forward_only = phases == "forward"
    layouts = graph_layouts(graph, batch, hierarchy, columns)
    matrices = graph_matrices(graph, layouts, batch, word_bytes, forward_only)
    steps = sent(matrices, (), collective_of(traffic_model), hierarchy)
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
                     footprint_parts(layouts, word_bytes, not forward_only, receive),
                     traffic_model=traffic_model, layouts=tuple(layouts), matrices=matrices)


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
