"""A Plan: a column of kinds for every node of a network (its kind at every level, top
first), and the bytes it moves.

Level h (0 at the top, the paper's H1) splits each of its groups into `hierarchy.sizes[h]`
sub-groups; a node's kind at that level says which of its loop dimensions is split
(`partition.kinds`). The costs the strategies search are the traffic model's
(`planner.traffic`: the layout models' on any graph, `partition.node_layout`; HyPar's
reading on a chain, `planner.chain_costs`), in bytes or, for time and energy, the
estimator's on a chain and `planner.timed_costs`' on any other graph. Every strategy's
columns (`Strategy.columns`: the planner's own in `planner.own_strategies`, the seeds' in
their modules) are planned here within a cube's memory, and the plan evaluated on its
messages.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from hypar_sim.errors import InputError, closest
from hypar_sim.hardware.config import HardwareConfig
from hypar_sim.partition import layout_costs, node_layout
from hypar_sim.partition.axes import Site
from hypar_sim.partition.axes import sites as graph_sites
from hypar_sim.partition.hierarchy import Hierarchy, as_hierarchy
from hypar_sim.partition.kinds import DEFAULT_KINDS, KINDS
from hypar_sim.partition.moved import Moved
from hypar_sim.partition.shares import Column
from hypar_sim.partition.steps import TransferKind
from hypar_sim.planner import memory
from hypar_sim.planner import traffic as traffic_models
from hypar_sim.planner.chain_costs import ChainCosts, estimated_search
from hypar_sim.planner.footprint import memory_picture, node_rule
from hypar_sim.planner.objectives import ESTIMATE_UNITS, OBJECTIVES
from hypar_sim.planner.options import PlanOptions
from hypar_sim.planner.plan_messages import (
    fed_nodes,
    graph_layouts,
    shared_cost,
    sharing_edges,
    training_matrices,
)
from hypar_sim.planner.strategies import (
    STRATEGIES,
    TRAINING_PLAN,
    check_objective_of,
    offered_columns,
)
from hypar_sim.planner.training import DEFAULT_TRAINING, Training, recompute_plan
from hypar_sim.workload.graph import Graph
from hypar_sim.workload.network import Network, as_graph, chain_of, is_chain

if TYPE_CHECKING:
    from hypar_sim.planner.estimate import Estimator


@dataclass(frozen=True)
class PlanRequest:
    """What a strategy plans: the graph, its sites (`partition.axes`), the array, the
    kinds allowed, the search asked for, and the traffic model's costs (or the estimate's)."""

    graph: Graph
    sites: Sequence[Site]
    batch: int
    hierarchy: Hierarchy
    kinds: tuple[str, ...]
    search: str
    costs: layout_costs.Costs
    notes: list[str]  # what the search had to give up (printed beside the plan)
    word_bytes: int = 4
    capacity_bytes: float | None = None  # one cube's memory (None: unlimited)
    config: HardwareConfig | None = None  # the hardware (planners with a cost model read it)
    memory_price: float = 0.0  # added per byte of a node's footprint (planner.memory)
    plan_text: str | None = None  # the user's plan (explicit)
    progress: bool = False  # a bar on stderr for a long search (exhaustive)
    traffic_model: str = "layout"  # or layout_levels: the same bytes, sent level by level
    training: Training = Training()  # what the footprint counts (`planner.training`)


@dataclass(frozen=True)
class Plan:
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
    training: Training = Training()  # optimizer, precision, recompute, ZeRO (`planner.training`)
    #: The busiest cube's peak memory, bytes: weights, gradients, optimizer state, activations
    #: (kept outputs) and buffers (`planner.footprint.memory_picture`).
    footprint_parts: tuple[tuple[str, float], ...] = ()
    objective: str = "bytes"  # what the search minimised
    estimate: float = 0.0  # its value for this plan: bytes, cycles or pJ (planner.timed_costs)
    traffic_model: str = "layout"  # how its messages are sent (`planner.traffic` collective)
    #: What follows from the columns, for the schedule to read: every node's layout and the
    #: bytes [src, dst] of every step (`plan_messages.graph_matrices`).
    layouts: tuple[node_layout.NodeLayout, ...] = field(default=(), compare=False, repr=False)
    matrices: Mapping[tuple[int, TransferKind], Moved] = field(default_factory=dict,
                                                                compare=False, repr=False)
    #: A pipeline plan's stage of every node (`planner.pipeline`; its columns are the
    #: stages' plan on the levels below the pipeline level); () without a pipeline.
    stages: tuple[int, ...] = ()

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

    @property
    def levels(self) -> int:
        return self.hierarchy.levels

    @property
    def choices(self) -> tuple[tuple[str, ...], ...]:
        """[level][node] kinds: HyPar's rows (Figure 5), the transpose of `columns` (a
        pipeline's top row: every node's stage)."""
        rows = tuple(tuple(column[h] for column in self.columns)
                     for h in range(self.levels - bool(self.stages)))
        return ((tuple(f"stage{s + 1}" for s in self.stages),) if self.stages else ()) + rows

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
                **self.training.to_dict(),
                "levels": self.hierarchy.levels,
                "plan": [list(level) for level in self.choices],  # HyPar's rows
                "nodes": [{"name": name, "kinds": list(column), "bytes": moved}
                          | ({"stage": self.stages[i] + 1} if self.stages else {})
                          for i, (name, column, moved) in enumerate(zip(
                              self.node_names, self.columns, self.node_bytes, strict=True))]}


def plan_graph(graph: Graph, strategy: str, hierarchy: Hierarchy, batch: int,
               kinds: Sequence[str] = DEFAULT_KINDS, search: str = "greedy",
               word_bytes: int = 4, config: HardwareConfig | None = None,
               plan_text: str | None = None, phases: str = "training",
               objective: str = "bytes", topology: str = "htree",
               progress: bool = False, traffic_model: str = "layout",
               overlap_gradients: bool = True, training: Training = DEFAULT_TRAINING) -> Plan:
    """The plan of `strategy` for `graph` on `hierarchy`, with its traffic (of a training
    step, or with `phases` "forward" of an inference), searched for the least bytes, or
    step time or energy on `topology`: on a chain of conv and fc layers by the chain's
    estimator (`planner.estimate`), on any other graph by `planner.timed_costs`."""
    spec = STRATEGIES.get(strategy)
    if spec is None or spec.columns is None:
        raise InputError(f"strategy: unknown '{strategy}'{closest(strategy, STRATEGIES)}; "
                         f"allowed: {', '.join(STRATEGIES)}")
    if (strategy == "explicit") != (plan_text is not None):
        raise InputError("plan: give --plan exactly when the strategy is 'explicit'")
    notes: list[str] = []
    model = traffic_models.traffic_model(traffic_model, phases)
    costs, estimator = model.plan_costs(graph, batch, word_bytes), None
    if objective != "bytes":
        costs, estimator = _timed_costs(graph, batch, hierarchy, word_bytes, model, objective,
                                        topology, config, overlap_gradients, training)
    costs.priced_by(node_rule(graph, training, word_bytes, phases != "forward"))
    request = PlanRequest(graph, graph_sites(graph), batch, hierarchy, tuple(kinds), search,
                          costs, notes, word_bytes,
                          float(config.cube_capacity_bytes) if config else None, config,
                          plan_text=plan_text, progress=progress, traffic_model=traffic_model,
                          training=training)

    def solve(price: float) -> memory.Solution:
        priced = dataclasses.replace(request, memory_price=price) if price else request
        if estimator is not None:
            return estimated_search(spec.columns, priced, estimator)
        return math.nan, spec.columns(priced)  # scored by `_fitting` where it needs it

    score, plan = _fitting(request, strategy, solve, phases)
    search = search if spec.honours_search else ""
    if phases == "forward" and spec.own_cost:
        search = TRAINING_PLAN  # its paper costs a training step: its plan, run forward
    if notes:
        search = f"{search} ({notes[0]})"
    estimate = plan.traffic_bytes if objective == "bytes" else \
        score if not math.isnan(score) else _plan_cost(request, plan.columns)
    return dataclasses.replace(plan, search=search, objective=objective, estimate=estimate)


def _timed_costs(graph: Graph, batch: int, hierarchy: Hierarchy, word_bytes: int,
                 model: traffic_models.TrafficModel, objective: str, topology: str,
                 config: HardwareConfig | None, overlap_gradients: bool,
                 training: Training = DEFAULT_TRAINING
                 ) -> tuple[layout_costs.Costs, Estimator | None]:
    """The cost tables in cycles or pJ on the topology: a chain's by the estimator (closed
    forms per level, refined on the sent messages: `chain_costs.estimated_search`; it
    costs an SGD step), any other graph's, or a chain's under another optimizer, ZeRO or
    recomputation, by timing its steps (`planner.timed_costs`, the layout models)."""
    from hypar_sim.hardware.config import load_hardware
    from hypar_sim.hardware.topology import make_topology
    from hypar_sim.planner.estimate import Estimator
    from hypar_sim.planner.timed_costs import TimedCosts

    config = config or load_hardware(overrides={"word_bytes": word_bytes})
    network = make_topology(topology, config, hierarchy)
    plain = dataclasses.replace(training, precision="fp32") == DEFAULT_TRAINING
    if is_chain(graph) and plain:
        estimator = Estimator(objective, model, config, network, overlap_gradients,
                              graph.nodes[0].name if graph.nodes else "")
        return ChainCosts(graph, estimator, model, batch, word_bytes), estimator
    recomputed = recompute_plan(graph, training.recompute).recomputed
    return TimedCosts(batch, word_bytes, model.forward_only, objective, config, network,
                      fed_nodes(graph), training,
                      {graph.nodes[i].name for i in recomputed}), None


def _fitting(request: PlanRequest, strategy: str,
             solve: Callable[[float], memory.Solution], phases: str) -> memory.Solution:
    """(its score, the plan) of the strategy's search (`solve(0)`), if the plan fits a cube
    (`Plan.footprint_parts`: the busiest cube's weights, gradients, kept outputs and
    largest receive); else, for a strategy that searches on the planner's costs (hypar),
    of its search again with a price on memory, the least price at which the plan fits;
    else one line with the need and the capacity. A score is NaN where the search gave none
    and none was needed."""
    capacity = request.capacity_bytes or math.inf
    costs, sites, hierarchy = request.costs, request.sites, request.hierarchy
    evaluated: dict[tuple[Column, ...], Plan] = {}

    def evaluate(found: Sequence[Column]) -> Plan:
        key = tuple(found)
        if key not in evaluated:
            evaluated[key] = evaluate_plan(request.graph, strategy, "", request.batch,
                                           hierarchy, found, request.word_bytes, phases,
                                           request.traffic_model, request.training)
        return evaluated[key]

    def footprint_of(found: Sequence[Column]) -> float:
        return evaluate(found).footprint_bytes

    def scored(solution: memory.Solution) -> memory.Solution:
        score, found = solution
        return (_plan_cost(request, found) if math.isnan(score) else score), found

    first = solve(0.0)
    needed = footprint_of(first[1])
    if needed <= capacity:
        return first[0], evaluate(first[1])
    spec = STRATEGIES[strategy]
    options = offered_columns(sites, request.batch, hierarchy, request.kinds, costs)
    least = sum(min(costs.footprint(site, column, hierarchy, member=0) for column in offered)
                for site, offered in zip(sites, options, strict=True))  # member 0's least
    fitters = [name for name in STRATEGIES if STRATEGIES[name].objectives == OBJECTIVES]
    if least > capacity or spec.objectives != OBJECTIVES:
        raise memory.too_big(request.graph.name, strategy, needed, least, capacity,
                             request.kinds, fitters)
    scale = max(scored(first)[0], 1.0) / capacity
    fitted, least = memory.fit(lambda price: scored(solve(price)), footprint_of, capacity,
                               scale)
    if fitted is None:  # the leanest footprints fit, not with the buffers of their plans
        raise memory.too_big(request.graph.name, strategy, needed, least, capacity,
                             request.kinds, fitters)
    return fitted[0], evaluate(fitted[1])


def _plan_cost(request: PlanRequest, columns: Sequence[Column]) -> float:
    """What a plan costs as the search sees it (the planner's cached costs: bytes of both
    passes, the loss and the gradients; or cycles or pJ)."""
    outputs = set(request.graph.outputs)
    costs, sites, hierarchy = request.costs, request.sites, request.hierarchy
    total = sum(costs.own(site, column, hierarchy, site.node.name in outputs)
                for site, column in zip(sites, columns, strict=True))
    return total + sum(shared_cost(costs, sites, edges, columns, hierarchy)
                       for edges in sharing_edges(request.graph))


def make_plan(workload: Graph | Network, strategy: str, hierarchy: int | Hierarchy, batch: int,
              plan_text: str | None = None, word_bytes: int = 4,
              options: PlanOptions | None = None, config: HardwareConfig | None = None) -> Plan:
    """The plan of `strategy` for `workload` (a graph, or a chain read as one) on the array of
    `hierarchy` (or 2**levels two-way levels, HyPar's array) under the options (kinds,
    search, objective, phases, traffic model: `paper`, HyPar's reading, takes a chain of
    conv and fc layers and HyPar's own strategies); `config` gives the strategies with a
    cost model or a memory limit their hardware (default: the default configuration)."""
    graph, hierarchy = as_graph(workload), as_hierarchy(hierarchy)
    if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
        raise InputError(f"batch: must be a positive integer, got {batch!r}")
    options = options or PlanOptions()
    model = traffic_models.traffic_model(options.traffic_model, options.phases)
    if model.chains_only:
        chain_of(graph, f"--traffic-model {options.traffic_model}")  # one line if not a chain
    kinds = options.kinds
    spec = STRATEGIES.get(strategy)  # None: plan_graph names the allowed ones
    if spec is not None:  # the takers are listed (their modules loaded) only on refusal
        check_objective_of(strategy, options.objective, STRATEGIES)
        if model.chains_only and spec.own_cost:
            takers = [name for name, entry in dict.items(STRATEGIES) if not entry.own_cost]
            raise InputError(f"--traffic-model {options.traffic_model}: strategy {strategy} "
                             "plans by its own paper's cost on the layouts of --traffic-model "
                             f"layout; HyPar's chain reading takes {', '.join(takers)}")
    unsplit = [k for k in kinds or () if KINDS[k].dim is None]  # replicate
    if options.kinds_given and spec is not None and spec.own_cost and unsplit:
        takers = [name for name, entry in dict.items(STRATEGIES) if not entry.own_cost
                  and entry.searches]
        raise InputError(f"--kinds: strategy {strategy} searches its paper's layouts, which "
                         f"have no kind like {unsplit[0]}; {', '.join(takers)} search it (or "
                         "name it in an explicit --plan)")
    if not options.kinds_given and spec is not None and spec.default_kinds:
        # its paper's kinds, those the model costs; not `replicate`, unless named: a
        # replicated node moves no bytes, so a search for bytes would compute every node
        # everywhere
        kinds = tuple(k for k in spec.default_kinds if k in model.kinds
                      and KINDS[k].dim is not None)
    if spec is not None:
        model.check(hierarchy, kinds, batch, spec.searches)
    if options.free_training:
        from hypar_sim.planner.stage_search import search_training

        if strategy != "optimal":
            flags = ", ".join(f"--{name} auto" for name in options.free_training)
            raise InputError(f"{flags}: only --strategy optimal chooses how to train; give "
                             f"{strategy} the options as values")
        return search_training(graph, hierarchy, batch, kinds, word_bytes, options, config)
    if options.training.pipelined:
        from hypar_sim.planner.pipeline import pipeline_plan

        return pipeline_plan(graph, strategy, hierarchy, batch, plan_text, word_bytes,
                             options, config)
    if plan_text is not None:
        strategy = "explicit"
    return plan_graph(graph, strategy, hierarchy, batch, kinds, options.search, word_bytes,
                      config, plan_text, options.phases, options.objective, options.topology,
                      options.progress, options.traffic_model, options.overlap_gradients,
                      options.training)


def evaluate_plan(workload: Graph | Network, strategy: str, search: str, batch: int,
                  hierarchy: Hierarchy, columns: Sequence[Column],
                  word_bytes: int = 4, phases: str = "training",
                  traffic_model: str = "layout", training: Training = DEFAULT_TRAINING) -> Plan:
    """Bytes per node (the steps keyed to it) and per level (the top-most level at which
    sender and receiver differ) of a fixed plan, from its messages (`phases` "forward": an
    inference's; sent as `traffic_model` sends them)."""
    graph = as_graph(workload)
    model = traffic_models.traffic_model(traffic_model, phases)
    model.check_plan(graph.nodes, batch, columns, hierarchy)
    layouts = graph_layouts(graph, batch, hierarchy, columns, model)
    matrices = model.plan_matrices(graph, layouts, batch, word_bytes)
    if phases != "forward":
        matrices = training_matrices(graph, matrices, training)
    steps = model.graph_steps(graph, columns, matrices, batch, hierarchy, word_bytes)
    per_node = [0.0] * len(graph.nodes)
    per_level = np.zeros(hierarchy.levels)
    receive = 0.0
    for (index, _), messages in steps.items():
        sent_bytes = messages.sent_bytes
        per_node[index] += float(sent_bytes.sum())
        per_level += np.bincount(messages.level, sent_bytes, minlength=hierarchy.levels)
        receive = max(receive, float(np.bincount(messages.dst, sent_bytes).max()))
    return Plan(graph.name, strategy, search, batch, hierarchy,
                tuple(n.name for n in graph.nodes), tuple(columns), tuple(per_node),
                tuple(float(b) for b in per_level), word_bytes, phases, training,
                memory_picture(graph, layouts, word_bytes, phases != "forward", receive,
                               training).parts,
                traffic_model=traffic_model, layouts=tuple(layouts), matrices=matrices)
