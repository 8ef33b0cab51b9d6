"""The strategies a user can ask for (a registry), all producing a Plan.

- ``hypar``: HyPar's search over the allowed kinds (`--search greedy`, its
  Algorithm 2, by default; `--search joint` for the exact whole-plan DP).
- ``data``: batch (dp) for every layer at every level.
- ``model``: in (mp) for every layer at every level.
- ``trick``: Krizhevsky's "one weird trick" (arXiv:1404.5997): conv layers
  batch, fully-connected layers in, at every level.
- ``optimal``: the joint search over every kind the traffic model takes (all of
  them under `layout`), for the objective asked (`--objective`).
- ``exhaustive``: every plan tried (small networks only).
- ``explicit``: a plan the user writes, one kind per layer per level.

Under the `layout` model a fixed strategy's kind that a layer cannot take at
a level (fewer indices than the level has members, e.g. MNIST's one input
channel) is replaced there by batch.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from hypar_sim.errors import InputError, closest
from hypar_sim.hardware.config import HardwareConfig, load_hardware
from hypar_sim.hardware.topology import make_topology
from hypar_sim.partition.hierarchy import Hierarchy
from hypar_sim.partition.kinds import BATCH, IN, KINDS
from hypar_sim.partition.shares import Column
from hypar_sim.partition.steps import largest_receive
from hypar_sim.planner import memory
from hypar_sim.planner import search as searches
from hypar_sim.planner.objectives import OBJECTIVES
from hypar_sim.planner.options import PlanOptions
from hypar_sim.planner.plan import Plan, evaluate_plan
from hypar_sim.planner.plan_text import read_node_plan
from hypar_sim.planner.traffic import TrafficModel, traffic_model
from hypar_sim.registry import LazyRegistry
from hypar_sim.workload.layers import Layer, LayerKind
from hypar_sim.workload.network import Network

if TYPE_CHECKING:  # the estimate loads only for --objective time or energy
    from hypar_sim.planner.estimate import Estimator
    from hypar_sim.planner.graph_plan import GraphRequest

@dataclass(frozen=True)
class PlanRequest:
    network: Network
    batch: int
    hierarchy: Hierarchy
    options: PlanOptions
    word_bytes: int
    model: TrafficModel
    capacity_bytes: float | None = None  # one cube's memory (None: unlimited)
    estimator: Estimator | None = None  # for --objective time or energy
    memory_price: float = 0.0  # added per byte of a column's footprint (planner.memory)
    config: HardwareConfig | None = None  # the hardware (planners with a cost model read it)

    @property
    def costs(self) -> TrafficModel | Estimator | memory.MemoryPrice:
        """What the searches minimise: the estimator's cycles or pJ, else the model's bytes;
        with a price on memory, plus the price of each column's footprint."""
        costs = self.estimator if self.estimator is not None else self.model
        if self.memory_price:
            return memory.MemoryPrice(costs, self.model.name, self.memory_price,
                                      self.hierarchy.members)
        return costs


Columns = Callable[[PlanRequest], Sequence[Column]]
GraphColumns = Callable[["GraphRequest"], list[Column]]


@dataclass(frozen=True)
class Strategy:
    """A way to plan: its columns, and what it needs."""

    columns: Columns | None  # its columns for HyPar's reading of a chain (None: it has none)
    searches: bool = False  # picks kinds by a search over the allowed kinds
    honours_search: bool = False  # --search greedy/joint applies
    takes_plan: bool = False  # the user's --plan
    objectives: tuple[str, ...] = ("bytes",)  # what its search can minimise (--objective)
    default_kinds: tuple[str, ...] = ()  # its paper's kinds, when the user gives none
    own_cost: str = ""  # what it minimises when that is its paper's own cost (for tables)
    graph: GraphColumns | None = None  # its columns for a graph network (`graph_plan`)


#: The seed papers' planners register themselves in their own modules, loaded when one
#: of them is first asked for (listing the names loads none of them).
STRATEGIES: LazyRegistry[Strategy] = LazyRegistry({
    name: f"hypar_sim.planner.{name}" for name in ("accpar", "grid", "soybean", "tofu")})


#: The search label of a seed strategy's plan under --phases forward: the strategy's plan of a
#: training step (its paper's cost is a training step's), whose forward pass is counted.
TRAINING_PLAN = "its paper's training-cost"


def register_strategy(name: str, searches: bool = False, honours_search: bool = False,
                      takes_plan: bool = False, objectives: tuple[str, ...] = ("bytes",),
                      default_kinds: tuple[str, ...] = (), own_cost: str = ""
                      ) -> Callable[[Columns], Columns]:
    """Add a strategy to the registry (the command line's choices come from it). A strategy
    whose search runs on `PlanRequest.costs` takes every objective; one that follows its
    paper's own cost takes bytes. `default_kinds`: the kinds it searches when the user
    names none (HyPar's batch and in otherwise), those the traffic model takes."""
    def add(function: Columns) -> Columns:
        STRATEGIES[name] = Strategy(function, searches, honours_search, takes_plan, objectives,
                                    default_kinds, own_cost)
        return function
    return add


def register_graph_columns(name: str) -> Callable[[GraphColumns], GraphColumns]:
    """Add the graph implementation to the planner's own strategy `name` (registered first
    with its columns for HyPar's reading of a chain, `--traffic-model paper`)."""
    def add(function: GraphColumns) -> GraphColumns:
        spec = dict.__getitem__(STRATEGIES, name)
        STRATEGIES[name] = dataclasses.replace(spec, graph=function)
        return function
    return add


def register_graph_strategy(name: str, searches: bool = False,
                            default_kinds: tuple[str, ...] = (), own_cost: str = ""
                            ) -> Callable[[GraphColumns], GraphColumns]:
    """Add a strategy that plans graphs alone (a seed paper's planner: its own cost, on the
    layout model's layouts; `--traffic-model paper` is HyPar's reading, not its)."""
    def add(function: GraphColumns) -> GraphColumns:
        STRATEGIES[name] = Strategy(None, searches, default_kinds=default_kinds,
                                    own_cost=own_cost, graph=function)
        return function
    return add


def graph_strategies() -> list[str]:
    """The strategies that plan graph networks."""
    return [name for name, spec in STRATEGIES.items() if spec.graph is not None]


def check_objective_of(strategy: str, objective: str, names: Iterable[str]) -> None:
    """One line if `strategy` does not minimise `objective`, naming those of `names` that
    do."""
    spec = STRATEGIES[strategy]
    if objective not in spec.objectives:
        takers = [n for n in names if objective in STRATEGIES[n].objectives]
        raise InputError(f"--objective: strategy '{strategy}' takes {', '.join(spec.objectives)}"
                         f" (its own cost), not {objective}; strategies that minimise "
                         f"{objective}: {', '.join(takers)}")


def objective_for(strategy: str, objective: str) -> str:
    """`objective` if `strategy` takes it, else bytes (`compare` runs every strategy with
    the objective the user asked where it applies)."""
    return objective if objective in STRATEGIES[strategy].objectives else "bytes"


def minimised(strategy: str, objective: str) -> str:
    """What `strategy` minimises when asked for `objective`: the objective, its paper's own
    cost, or nothing (a fixed strategy)."""
    spec = STRATEGIES[strategy]
    if objective in spec.objectives and spec.searches:
        return objective if len(spec.objectives) > 1 or not spec.own_cost else spec.own_cost
    return spec.own_cost or "- (fixed)"


def _uniform(request: PlanRequest, pick: Callable[[Layer], str]) -> list[Column]:
    """The same kind for a layer at every level, batch where the model does not offer it."""
    columns = []
    for layer in request.network.layers:
        column: Column = ()
        for level in range(request.hierarchy.levels):
            upper = Hierarchy(request.hierarchy.sizes[:level + 1])
            kind = pick(layer)
            if not request.model.offered(layer, request.batch, column + (kind,), upper):
                kind = BATCH
            if not request.model.offered(layer, request.batch, column + (kind,), upper):
                tried = "batch cannot" if pick(layer) == BATCH else \
                    f"neither {pick(layer)} nor batch can"
                raise InputError(
                    f"layer {layer.name}: {tried} split it at level {level + 1} of "
                    f"hierarchy {request.hierarchy} (batch {request.batch}, fewer samples than "
                    f"the {math.prod(request.hierarchy.sizes[:level + 1])} groups); use a batch "
                    f"of at least {request.hierarchy.members} or fewer accelerators")
            column += (kind,)
        columns.append(column)
    return columns


@register_strategy("hypar", searches=True, honours_search=True, objectives=OBJECTIVES)
def _hypar(request: PlanRequest) -> Sequence[Column]:
    find = searches.joint if request.options.search == "joint" else searches.greedy
    return find(request.costs, request.network.layers, request.batch, request.hierarchy,
                request.options.kinds, request.word_bytes)


@register_strategy("optimal", searches=True, objectives=OBJECTIVES, default_kinds=tuple(KINDS))
def _optimal(request: PlanRequest) -> Sequence[Column]:
    return searches.joint(request.costs, request.network.layers, request.batch,
                          request.hierarchy, request.options.kinds, request.word_bytes)


@register_strategy("data")
def _data(request: PlanRequest) -> Sequence[Column]:
    return _uniform(request, lambda layer: BATCH)


@register_strategy("model")
def _model(request: PlanRequest) -> Sequence[Column]:
    return _uniform(request, lambda layer: IN)


@register_strategy("trick")
def _trick(request: PlanRequest) -> Sequence[Column]:
    return _uniform(request, lambda layer: BATCH if layer.kind is LayerKind.CONV else IN)


@register_strategy("exhaustive", searches=True, objectives=OBJECTIVES)
def _exhaustive(request: PlanRequest) -> Sequence[Column]:
    return searches.brute_force(request.costs, request.network.layers, request.batch,
                                request.hierarchy, request.options.kinds, request.word_bytes,
                                request.options.progress)[1]


@register_strategy("explicit", takes_plan=True)
def _explicit(request: PlanRequest) -> Sequence[Column]:
    columns = read_node_plan(request.options.plan_text or "", request.network.layer_names,
                             request.hierarchy.levels)
    for layer, column in zip(request.network.layers, columns, strict=True):
        if not request.model.offered(layer, request.batch, column, request.hierarchy):
            raise InputError(
                f"--plan: layer {layer.name} cannot take ({' '.join(column)}) on hierarchy "
                f"{request.hierarchy} under --traffic-model {request.model.name}: a kind splits "
                "a dimension into more parts than it has; allowed kinds there: "
                f"{', '.join(_offered_here(request, layer, column))}")
    return columns


def _offered_here(request: PlanRequest, layer: Layer, column: Column) -> list[str]:
    """Kinds the layer can take at the first level where `column` fails."""
    for level in range(len(column)):
        upper = Hierarchy(request.hierarchy.sizes[:level + 1])
        if not request.model.offered(layer, request.batch, column[:level + 1], upper):
            return [k for k in KINDS if request.model.offered(layer, request.batch,
                                                              column[:level] + (k,), upper)]
    return list(KINDS)


def as_hierarchy(levels_or_hierarchy: int | Hierarchy) -> Hierarchy:
    """A Hierarchy, or an int number of two-way levels (HyPar's 2**H array)."""
    if isinstance(levels_or_hierarchy, Hierarchy):
        return levels_or_hierarchy
    levels = levels_or_hierarchy
    if isinstance(levels, bool) or not isinstance(levels, int) or not 0 <= levels <= 20:
        raise InputError(f"levels: must be an integer from 0 to 20, got {levels!r}")
    return Hierarchy.binary(levels)


def make_plan(network: Network, strategy: str, hierarchy: int | Hierarchy, batch: int,
              plan_text: str | None = None, word_bytes: int = 4,
              options: PlanOptions | None = None, config: HardwareConfig | None = None) -> Plan:
    """The plan of `strategy` for `network` on the array of `hierarchy` (or 2**levels).
    `config`: the hardware the time and energy objectives are estimated on (default: the
    default configuration with this array and batch)."""
    hierarchy = as_hierarchy(hierarchy)
    options = options or PlanOptions()
    if plan_text is not None:
        options = dataclasses.replace(options, plan_text=plan_text)
    if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
        raise InputError(f"batch: must be a positive integer, got {batch!r}")
    if strategy not in STRATEGIES:
        raise InputError(f"strategy: unknown '{strategy}'{closest(strategy, STRATEGIES)}; "
                         f"allowed: {', '.join(STRATEGIES)}")
    spec = STRATEGIES[strategy]
    if spec.columns is None:
        takers = ", ".join(name for name, entry in dict.items(STRATEGIES)  # loaded ones
                           if entry.columns is not None)
        raise InputError(f"--traffic-model {options.traffic_model}: strategy {strategy} plans "
                         f"by its own paper's cost, on the graph (`graph_plan.make_graph_plan`, "
                         f"--traffic-model layout); HyPar's chain reading takes {takers}")
    if spec.takes_plan != (options.plan_text is not None):
        raise InputError("plan: give --plan exactly when the strategy is 'explicit'")
    check_objective_of(strategy, options.objective, STRATEGIES)
    model = traffic_model(options.traffic_model, options.phases)
    if not options.kinds_given and spec.default_kinds:
        options = dataclasses.replace(options, kinds=tuple(
            kind for kind in spec.default_kinds if kind in model.kinds))
    model.check(hierarchy, options.kinds, batch, spec.searches)
    if config is None:
        config = load_hardware(overrides={"word_bytes": word_bytes})
    request = PlanRequest(network, batch, hierarchy, options, word_bytes, model,
                          float(config.cube_capacity_bytes), config=config)
    estimator = _estimator(request, config) if options.objective != "bytes" else None
    search = options.search if spec.honours_search else ""
    if options.phases == "forward" and spec.own_cost:
        search = TRAINING_PLAN  # its paper costs a training step: its plan, run forward

    def evaluate(columns: Sequence[Column]) -> Plan:
        choices = tuple(zip(*columns, strict=True)) if hierarchy.levels else ()
        return evaluate_plan(network, batch, choices, strategy, word_bytes, hierarchy,
                             options.traffic_model, search, options.phases)

    score, plan = _fitting(spec, request, estimator, strategy, evaluate)
    return dataclasses.replace(plan, objective=options.objective,
                               estimate=score if estimator else plan.traffic_bytes)


def _fitting(spec: Strategy, request: PlanRequest, estimator: Estimator | None,
             strategy: str, evaluate: Callable[[Sequence[Column]], Plan]
             ) -> tuple[float, Plan]:
    """(the objective's value, the plan) of the strategy, within a cube's memory
    (`planner.memory`); `evaluate` gives a plan's traffic from its columns."""
    layers, hierarchy = request.network.layers, request.hierarchy
    name = request.model.name

    def footprint_of(columns: Sequence[Column]) -> float:
        """Bytes per cube: the layers' footprints and the largest receive (its buffer); where
        the bytes of the busiest layer (its own steps and both its boundaries) fit beside the
        footprints, that bound instead (no messages to enumerate: a 1000-layer chain on 1024
        members has millions)."""
        kept = memory.plan_footprint(name, layers, request.batch, columns, hierarchy,
                                     request.word_bytes)
        moved = max(searches.layer_costs(request.model, layers, request.batch, columns,
                                         hierarchy, request.word_bytes), default=0.0)
        if kept + moved <= capacity:  # a step moves at most its layer's own and boundary bytes
            return kept + moved
        return kept + largest_receive(request.model.steps(layers, request.batch, columns,
                                                          hierarchy, request.word_bytes))

    capacity = request.capacity_bytes or math.inf
    solution = _solve(spec, request, estimator, scored=False)  # bytes: the plan's own total
    plan = evaluate(solution[1])
    kept = memory.plan_footprint(name, layers, request.batch, solution[1], hierarchy,
                                 request.word_bytes)
    if kept + plan.traffic_bytes <= capacity:  # no layer moves more than the whole plan
        return solution[0], plan
    needed = footprint_of(solution[1])
    if needed <= capacity:
        return solution[0], plan
    if estimator is None:
        solution = (searches.chain_cost(request.model, layers, request.batch, solution[1],
                                        hierarchy, request.word_bytes), solution[1])
    kinds = request.options.kinds
    least = sum(float(memory.column_footprints(
        name, layer, request.batch, searches.all_columns(request.model, layer, request.batch,
                                                         hierarchy, kinds),
        hierarchy, request.word_bytes).min()) for layer in layers)
    if least > capacity or spec.objectives != OBJECTIVES:
        raise memory.too_big(request.network.name, strategy, needed, least, capacity, kinds)
    scale = max(solution[0], 1.0) / capacity
    fitted, least = memory.fit(
        lambda price: _solve(spec, dataclasses.replace(request, memory_price=price), estimator),
        footprint_of, capacity, scale)
    if fitted is None:  # the leanest footprints fit, not with the buffers of their plans
        raise memory.too_big(request.network.name, strategy, needed, least, capacity, kinds)
    return fitted[0], evaluate(fitted[1])


def _solve(spec: Strategy, request: PlanRequest, estimator: Estimator | None,
           scored: bool = True) -> memory.Solution:
    """(the objective's value, columns) of the strategy's search; with an estimator, the
    best over its weights, each DP re-run until its plan's boundaries are all sent. Without
    an estimator and not `scored`, the value is NaN (not computed: one search, nothing to
    compare it with)."""
    layers, batch, hierarchy = request.network.layers, request.batch, request.hierarchy
    word_bytes = request.word_bytes
    best: memory.Solution | None = None
    for weight in estimator.weights if estimator else (0.0,):
        if estimator:
            estimator.weight = weight
        columns = spec.columns(dataclasses.replace(request, estimator=estimator))
        while estimator and estimator.refine(layers, batch, columns, hierarchy, word_bytes):
            columns = spec.columns(dataclasses.replace(request, estimator=estimator))
        if estimator:
            score = estimator.total(layers, batch, columns, hierarchy, word_bytes)
        elif scored:
            score = searches.chain_cost(request.model, layers, batch, columns, hierarchy,
                                        word_bytes)
        else:
            return math.nan, columns
        if best is None or score < best[0]:
            best = (score, columns)
    assert best is not None
    return best


def _estimator(request: PlanRequest, config: HardwareConfig) -> Estimator:
    """The time or energy estimate on the request's array (`planner.estimate`)."""
    from hypar_sim.planner.estimate import Estimator

    options = request.options
    topology = make_topology(options.topology, config, request.hierarchy)
    first = request.network.layers[0].name if request.network.layers else ""
    return Estimator(options.objective, request.model, config, topology,
                     options.overlap_gradients, first)


# The graph implementations of the strategies above (hypar, optimal, exhaustive, data, model,
# trick, explicit) register themselves on these entries.
from hypar_sim.planner import own_strategies  # noqa: E402, F401
