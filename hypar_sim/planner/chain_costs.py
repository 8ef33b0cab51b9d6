"""The planner's cost tables of a chain graph from a layer-wise cost model.

A graph whose nodes are a chain of conv and fc layers (`network.chain_of`) can
be costed layer by layer, as HyPar's Algorithm 1 costs it: every column's own
cost and every boundary's, one table at a time. Two models do so:

- HyPar's reading of its Tables 1 and 2 (`traffic.PaperTraffic`,
  `--traffic-model paper`: the figures of its evaluation), bytes;
- the estimator of step time and energy (`estimate.Estimator`: closed forms per
  level, refined on the sent messages), cycles or pJ, far faster on a chain than
  timing every pair of columns (`timed_costs`).

`ChainCosts` gives either to the graph planner's searches as the tables of
`layout_costs.Costs`; which columns a node is offered and what a member keeps
are the traffic model's (HyPar's reading offers batch and in at any level and
keeps its equal shares: `PaperTraffic.node_layout`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Protocol

import numpy as np

from hypar_sim.partition import layout_costs, node_layout
from hypar_sim.partition.axes import Site
from hypar_sim.partition.hierarchy import Hierarchy
from hypar_sim.partition.shares import Column
from hypar_sim.planner.traffic import TrafficModel
from hypar_sim.workload.graph import Graph
from hypar_sim.workload.layers import Layer
from hypar_sim.workload.network import layer_of

if TYPE_CHECKING:
    from hypar_sim.planner.estimate import Estimator
    from hypar_sim.planner.plan import PlanRequest


class LayerCosts(Protocol):
    """A chain's cost model: a traffic model or the estimator."""

    def offered(self, layer: Layer, batch: int, column: Column,
                hierarchy: Hierarchy) -> bool: ...

    def own_costs(self, layer: Layer, batch: int, columns: Sequence[Column],
                  hierarchy: Hierarchy, word_bytes: int, last: bool) -> np.ndarray: ...

    def boundary_costs(self, producer: Layer, consumer: Layer, batch: int,
                       producer_columns: Sequence[Column], columns: Sequence[Column],
                       hierarchy: Hierarchy, word_bytes: int) -> np.ndarray: ...


class ChainCosts(layout_costs.Costs):
    """`layout_costs.Costs` of a chain graph from `costs` (bytes, cycles or pJ), the nodes'
    layouts and offers from `model`."""

    def __init__(self, graph: Graph, costs: LayerCosts, model: TrafficModel, batch: int,
                 word_bytes: int) -> None:
        super().__init__(batch, word_bytes, model.forward_only)
        self.costs, self.model = costs, model
        self.layers = {node.name: layer_of(node) for node in graph.nodes}

    def chain_layers(self, sites: Sequence[Site]) -> list[Layer]:
        return [self.layers[site.node.name] for site in sites]

    def offered(self, site: Site, batch: int, column: Column, hierarchy: Hierarchy) -> bool:
        return self.costs.offered(self.layers[site.node.name], batch, column, hierarchy)

    def chained(self, producer: Site, consumer: Site | None, index: int,
                columns: Sequence[Column]) -> tuple[Layer, ...] | None:
        """Every edge of a chain is costed by the model's table (never pair by pair: the
        base class's `own` and `edge` read one cell of it)."""
        sites = (producer,) if consumer is None else (producer, consumer)
        return tuple(self.chain_layers(sites))

    def own_table(self, site: Site, columns: Sequence[Column], hierarchy: Hierarchy,
                  is_output: bool) -> np.ndarray:
        return np.asarray(self.costs.own_costs(self.layers[site.node.name], self.batch,
                                               list(columns), hierarchy, self.word_bytes,
                                               is_output), dtype=float)

    def edge_table(self, producer: Site, consumer: Site, index: int,
                   producer_columns: Sequence[Column], columns: Sequence[Column],
                   hierarchy: Hierarchy) -> np.ndarray:
        made, read = self.chain_layers((producer, consumer))
        return np.asarray(self.costs.boundary_costs(made, read, self.batch,
                                                    list(producer_columns), list(columns),
                                                    hierarchy, self.word_bytes), dtype=float)

    def node_layout(self, site: Site, column: Column, hierarchy: Hierarchy
                    ) -> node_layout.NodeLayout:
        return self.model.node_layout(site, self.batch, column, hierarchy)


def estimated_search(columns_of: Callable[[PlanRequest], list[Column]], request: PlanRequest,
                     estimator: Estimator) -> tuple[float, list[Column]]:
    """(estimated cycles or pJ, columns) of a strategy's search on a chain under the
    estimator (`request.costs` a `ChainCosts` of it): for each overlap weight w the search,
    re-run until the boundaries of its plan have all been sent (`Estimator.refine`), and the
    best of them by the whole plan's estimate (`Estimator.total`)."""
    costs = request.costs
    assert isinstance(costs, ChainCosts)
    layers = costs.chain_layers(request.sites)
    batch, hierarchy, word_bytes = request.batch, request.hierarchy, request.word_bytes
    best: tuple[float, list[Column]] | None = None
    for weight in estimator.weights:
        estimator.weight = weight
        columns = columns_of(request)
        while estimator.refine(layers, batch, columns, hierarchy, word_bytes):
            columns = columns_of(request)
        score = estimator.total(layers, batch, columns, hierarchy, word_bytes)
        if best is None or score < best[0]:
            best = (score, columns)
    assert best is not None
    return best
