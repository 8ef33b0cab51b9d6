"""The planner's own strategies on a graph network: their columns over the layout model's
cost tables (`layout_costs.Costs`, or `timed_costs.TimedCosts` for time and energy).

- `hypar`: HyPar's search generalised to graphs: `greedy` decides level by level from the
  top, each level exactly over the whole graph (min-sum variable elimination in topological
  order, `search`); `joint` decides all levels at once, exactly, where the graph's state
  space allows.
- `optimal`: the joint search over every kind but replicate; `exhaustive`: every plan tried.
- `data` (batch everywhere), `model` (in wherever a node can take it, else batch), `trick`
  (fc nodes in, the rest batch), `explicit` (the user's `--plan`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np

from hypar_sim.errors import InputError
from hypar_sim.partition import layout_costs
from hypar_sim.partition.axes import Site
from hypar_sim.partition.hierarchy import Hierarchy
from hypar_sim.partition.kinds import BATCH, IN, KINDS
from hypar_sim.partition.shares import Column
from hypar_sim.planner.objectives import OBJECTIVES
from hypar_sim.planner.plan_messages import graph_edges, shared_table, sharing_edges
from hypar_sim.planner.plan_text import read_node_plan
from hypar_sim.planner.search import Factor, every_assignment, minimise_or_search
from hypar_sim.planner.strategies import no_option_error, offered_columns, register_strategy
from hypar_sim.planner.traffic import traffic_model
from hypar_sim.workload.graph import Graph, Node

if TYPE_CHECKING:
    from hypar_sim.planner.plan import PlanRequest

#: Most whole plans the `exhaustive` strategy will enumerate.
MAX_BRUTE_FORCE_PLANS = 2**22

#: Most cells of one table over a tensor's producer and its consumers (some may read it
#: alike: one transfer serves them); beyond that, each edge is costed as if alone, and the
#: plan's bytes, counted on its messages, may be less than the search thought.
_SHARED_CELLS = 2**16


def _solve(graph: Graph, sites: Sequence[Site], options: Sequence[Sequence[Column]],
           hierarchy: Hierarchy, costs: layout_costs.Costs, notes: list[str],
           approximate: bool = True, price: float = 0.0, members: int = 1) -> list[Column]:
    """The cheapest option of every node: exact over the graph, or (`approximate`, where
    the graph is too entangled for that) a local search, noted in `notes` (`_factors`)."""
    factors = _factors(graph, sites, options, hierarchy, costs, price, members)
    choice = minimise_or_search([len(o) for o in options], factors, range(len(graph.nodes)),
                                notes, approximate)
    return [opts[i] for opts, i in zip(options, choice, strict=True)]


def _factors(graph: Graph, sites: Sequence[Site], options: Sequence[Sequence[Column]],
             hierarchy: Hierarchy, costs: layout_costs.Costs, price: float = 0.0,
             members: int = 1) -> list[Factor]:
    """The cost tables of a plan over every node's `options`: each node's own, each group
    of consumers that may read a tensor alike (or each edge alone). With a `price` per
    byte, a node's own cost adds its footprint's (on the top levels of an array of
    `members`, the greedy search's, a group's footprint spread over its members)."""
    outputs = set(graph.outputs)
    spread = max(members, hierarchy.members) / hierarchy.members
    factors = [Factor((i,), costs.own_table(site, options[i], hierarchy,
                                            site.node.name in outputs)
                      + np.array([price * costs.footprint(site, column, hierarchy) / spread
                                  if price else 0.0 for column in options[i]]))
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
            table = costs.edge_table(sites[p], sites[c], k, options[p], options[c], hierarchy)
            factors.append(Factor((p, c), table))
    return factors


def greedy_columns(graph: Graph, sites: Sequence[Site], batch: int, hierarchy: Hierarchy,
            kinds: Sequence[str], costs: layout_costs.Costs, notes: list[str],
            price: float = 0.0) -> list[Column]:
    """HyPar's search generalised to graphs: level by level from the top, each level's
    kinds exact over the whole graph given the levels above (`_solve`)."""
    columns: list[Column] = [() for _ in sites]
    for level in range(hierarchy.levels):
        upper = Hierarchy(hierarchy.sizes[:level + 1])
        options = []
        for site, prefix in zip(sites, columns, strict=True):
            offered = [prefix + (k,) for k in kinds
                       if costs.offered(site, batch, prefix + (k,), upper)]
            if not offered:
                raise no_option_error(site.node, kinds, upper, batch)
            options.append(offered)
        columns = _solve(graph, sites, options, upper, costs, notes, price=price,
                         members=hierarchy.members)
    return columns


#: Most cost-table cells an exact search over all levels at once may fill (each a costed
#: redistribution between two columns, about 0.3 ms: resnet18's 79k on 4 accelerators take
#: 25 s; the edges between a chain's layers, costed by closed forms, are not counted):
#: beyond it the search is refused in one line rather than left running for hours.
MAX_TABLE_CELLS = 2**17


def _joint(graph: Graph, sites: Sequence[Site], batch: int, hierarchy: Hierarchy,
           kinds: Sequence[str], costs: layout_costs.Costs, notes: list[str],
           price: float = 0.0, strategy: str = "hypar --search joint") -> list[Column]:
    """The exact plan over all levels at once (every node's columns of `kinds`)."""
    options = offered_columns(sites, batch, hierarchy, kinds, costs)
    cells = sum(len(options[p]) * len(options[c]) for p, c, k in graph_edges(graph)
                if costs.chained(sites[p], sites[c], k, [*options[p], *options[c]]) is None)
    if cells > MAX_TABLE_CELLS:
        widest = max(len(o) for o in options)
        used = [k for k in kinds if any(k in column for o in options for column in o)]
        instead = "--search greedy (level by level)" if strategy.startswith("hypar") else \
            "hypar (level by level)"
        raise InputError(
            f"--strategy {strategy}: the exact search on {graph.name} costs {cells:,} pairs of "
            f"columns (up to {widest:,} columns of kinds {','.join(used)} per node over "
            f"{hierarchy.levels} levels), more than {MAX_TABLE_CELLS:,}; use fewer --kinds, "
            f"fewer levels (--accelerators) or {instead}")
    return _solve(graph, sites, options, hierarchy, costs, notes, approximate=False,
                  price=price)


def _fixed(request: PlanRequest, preferred: Callable[[Node], str]) -> list[Column]:
    """Every node the kind `preferred` picks for it at every level, batch where it cannot
    take that kind."""
    batch, hierarchy = request.batch, request.hierarchy
    columns = []
    for site in request.sites:
        column: Column = ()
        for level in range(hierarchy.levels):
            upper = Hierarchy(hierarchy.sizes[:level + 1])
            for kind in (preferred(site.node), BATCH):
                if request.costs.offered(site, batch, column + (kind,), upper):
                    column += (kind,)
                    break
            else:
                raise no_option_error(site.node, (preferred(site.node), BATCH), upper, batch)
        columns.append(column)
    return columns


@register_strategy("hypar", searches=True, honours_search=True, objectives=OBJECTIVES)
def _hypar(request: PlanRequest) -> list[Column]:
    find = _joint if request.search == "joint" else greedy_columns
    return find(request.graph, request.sites, request.batch, request.hierarchy, request.kinds,
                request.costs, request.notes, request.memory_price)


@register_strategy("optimal", searches=True, objectives=OBJECTIVES, default_kinds=tuple(KINDS))
def _optimal(request: PlanRequest) -> list[Column]:
    """The exact least-bytes plan over all levels and every allowed kind (`_joint`)."""
    return _joint(request.graph, request.sites, request.batch, request.hierarchy,
                  request.kinds, request.costs, request.notes, request.memory_price, "optimal")


@register_strategy("exhaustive", searches=True, objectives=OBJECTIVES)
def _exhaustive(request: PlanRequest) -> list[Column]:
    """Every plan of the allowed kinds tried (`search.every_assignment`)."""
    options = offered_columns(request.sites, request.batch, request.hierarchy, request.kinds,
                              request.costs)
    count = math.prod(len(o) for o in options)
    if count > MAX_BRUTE_FORCE_PLANS:
        many = f"{count:,}" if count < 10**12 else f"about 10^{math.floor(math.log10(count))}"
        raise InputError(f"--strategy exhaustive: {many} plans of {request.graph.name} to try, "
                         f"more than {MAX_BRUTE_FORCE_PLANS:,}; use a smaller network, fewer "
                         "levels or kinds, or optimal (the least of the same plans, by "
                         "elimination)")
    factors = _factors(request.graph, request.sites, options, request.hierarchy, request.costs,
                       request.memory_price)
    choice = every_assignment([len(o) for o in options], factors, request.progress)[1]
    return [opts[i] for opts, i in zip(options, choice, strict=True)]


@register_strategy("explicit", takes_plan=True)
def _explicit(request: PlanRequest) -> list[Column]:
    names = [site.node.name for site in request.sites]
    columns = read_node_plan(request.plan_text or "", names, request.hierarchy.levels)
    taken = traffic_model(request.traffic_model).kinds
    for site, column in zip(request.sites, columns, strict=True):
        if not set(column) <= set(taken):
            raise InputError(f"--plan: node {site.node.name} takes ({' '.join(column)}), but "
                             f"--traffic-model {request.traffic_model} takes only kinds "
                             f"{', '.join(taken)}")
        if not request.costs.offered(site, request.batch, column, request.hierarchy):
            raise InputError(
                f"--plan: node {site.node.name} ({site.node.op}, output {list(site.node.shape)}) "
                f"cannot take ({' '.join(column)}) on hierarchy {request.hierarchy} with batch "
                f"{request.batch}: a kind splits a dimension into more parts than it has, or "
                "one the node does not have")
    return columns


@register_strategy("data")
def _data(request: PlanRequest) -> list[Column]:
    return _fixed(request, lambda node: BATCH)


@register_strategy("model")
def _model(request: PlanRequest) -> list[Column]:
    return _fixed(request, lambda node: IN)


@register_strategy("trick")
def _trick(request: PlanRequest) -> list[Column]:
    """Krizhevsky's "one weird trick" (arXiv:1404.5997) on a graph: fully-connected nodes
    (weighted multiply-accumulates without a window) split their input channels (mp), every
    other node the batch (dp)."""
    def kind(node: Node) -> str:
        desc = node.desc
        fc = desc is not None and desc.weights is not None and desc.channel is not None \
            and not desc.window
        return IN if fc else BATCH
    return _fixed(request, kind)
