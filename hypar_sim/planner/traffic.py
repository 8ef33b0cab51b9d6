"""Traffic models: a plan's bytes, per member, from one function each (registry by name).

A model gives the planner its costs (what a layer's own column costs, what a
boundary between two columns costs) and the simulator its messages; both
come from the same transfers, so the two cannot disagree.

- `paper`: HyPar's reading (`comm_model`), kinds batch and in on two-way
  levels only; the Figure 8 numbers.
- `layout`: the redistribution rule on the members' real layouts
  (`partition.node_layout`), any kind and level size.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Sequence
from functools import lru_cache

import numpy as np

from hypar_sim.errors import InputError, closest
from hypar_sim.partition import layout_costs, node_layout, shares, totals
from hypar_sim.partition.axes import Site
from hypar_sim.partition.hierarchy import Hierarchy
from hypar_sim.partition.kinds import BATCH, IN, KINDS, Dim
from hypar_sim.partition.moved import Moved
from hypar_sim.partition.shares import Column, Share
from hypar_sim.partition.steps import Phase, StepMessages, TransferKind
from hypar_sim.planner.comm_model import LayerSplit, Parallelism, layer_transfers, pair_costs
from hypar_sim.workload.graph import Graph
from hypar_sim.workload.layers import Layer
from hypar_sim.workload.network import Network, as_graph, layer_of

StepKey = tuple[int, TransferKind]

_PAPER_KINDS = {BATCH: Parallelism.DP, IN: Parallelism.MP}


@lru_cache(maxsize=65536)
def _paper_share(layer: Layer, batch: int, prefix: Column, word_bytes: int) -> LayerSplit:
    """What a sub-array holds of `layer` after the levels of `prefix` (cached: every prefix
    is split once, so a search over H levels costs O(H) splits a column, not O(H**2))."""
    if not prefix:
        return LayerSplit(layer, float(batch), 1.0, word_bytes)
    return _paper_share(layer, batch, prefix[:-1], word_bytes).split(_PAPER_KINDS[prefix[-1]])


@lru_cache(maxsize=65536)
def _paper_pair_costs(layer: Layer, batch: int, prefix: Column, word_bytes: int,
                      forward_only: bool) -> tuple[dict[str, float], float]:
    """One pair's bytes at the level below `prefix`: each kind's own (intra) bytes, and the
    inter-layer bytes of a batch -> in boundary (Tables 1 and 2; cached like the shares)."""
    split = _paper_share(layer, batch, prefix, word_bytes)
    own = {kind: pair_costs(split, None, choice, forward_only)[0]
           for kind, choice in _PAPER_KINDS.items()}
    return own, pair_costs(split, Parallelism.DP, Parallelism.MP, forward_only)[1]


#: What a step simulates: a whole training step, or the forward pass alone (inference).
PHASES = ("training", "forward")


class _Phased:
    """A traffic model counts a training step's transfers, or with `forward_only` (inference:
    `for_phases("forward")`) those of the forward pass alone."""

    forward_only = False
    #: It reads a network as HyPar's chain of conv and fc layers (`network.chain_of`); the
    #: others read any graph, sending its steps by their `collective`.
    chains_only = False
    #: Its gradient steps may be fused in buckets (the layout models' all-reduces, as
    #: data-parallel frameworks fuse them); HyPar exchanges each layer's as it is computed.
    fuses_gradients = True

    def for_phases(self, phases: str):
        """This model for `phases` (one of `PHASES`)."""
        if phases not in PHASES:
            raise InputError(f"--phases: unknown '{phases}'{closest(phases, PHASES)}; allowed: "
                             f"{', '.join(PHASES)}")
        if (phases == "forward") == self.forward_only:
            return self
        variant = copy.copy(self)
        variant.forward_only = phases == "forward"
        return variant

    def _keep(self, kind: TransferKind) -> bool:
        return not self.forward_only or kind.phase is Phase.FORWARD


class PaperTraffic(_Phased):
    """HyPar's per-level reading of Tables 1 and 2 (see `planner.comm_model`)."""

    name = "paper"
    summary = "HyPar's reading of its Tables 1 and 2 (batch and in, two-way levels; Fig 8)"
    chains_only = True
    fuses_gradients = False
    #: Every kind it can cost (the `optimal` strategy searches them all).
    kinds = tuple(_PAPER_KINDS)

    def check(self, hierarchy: Hierarchy, kinds: Sequence[str], batch: int,
              searches: bool) -> None:
        """Before planning: kinds batch and in on two-way levels only; a search may pick dp
        at every level, so the batch must divide by the array."""
        bad = [k for k in kinds if k not in _PAPER_KINDS]
        if bad or not hierarchy.is_binary:
            raise InputError(
                f"--traffic-model: paper takes only kinds {','.join(_PAPER_KINDS)} "
                f"({', '.join(map(str, _PAPER_KINDS.values()))}) on two-way levels (got kinds "
                f"{','.join(kinds)}, hierarchy {hierarchy}); use --traffic-model layout for "
                "other kinds or level sizes")
        if searches and batch % hierarchy.members:
            raise InputError(
                f"batch: {batch} is not divisible by the {hierarchy.members} accelerators, which "
                "data parallelism at every level needs under --traffic-model paper; choose a "
                f"multiple of {hierarchy.members} or --traffic-model layout")

    def check_plan(self, layers: Sequence[Layer], batch: int, columns: Sequence[Column],
                   hierarchy: Hierarchy) -> None:
        """HyPar's reading halves the batch at every dp level: refuse a batch that does not
        divide (the layout model gives uneven shares instead)."""
        for layer, column in zip(layers, columns, strict=True):
            parts = math.prod(size for size, kind in zip(hierarchy.sizes, column, strict=True)
                              if _PAPER_KINDS.get(kind) is Parallelism.DP)
            if batch % parts:
                raise InputError(
                    f"batch: {batch} cannot be split by data parallelism into {parts} parts "
                    f"(layer {layer.name}) under --traffic-model paper; use a batch divisible "
                    f"by {parts} or --traffic-model layout")

    def offered(self, layer: Layer, batch: int, column: Column, hierarchy: Hierarchy) -> bool:
        """HyPar's reading works on fractions: every batch/in column is allowed (a batch
        that does not divide is refused when the plan is evaluated)."""
        return _PAPER_KINDS.keys() >= set(column)

    def member_shares(self, layer: Layer, batch: int, column: Column,
                      hierarchy: Hierarchy) -> list[Share]:
        """Every member holds the same share: the batch and input-channel fractions after
        all levels. A share of fewer than one channel computes a whole one (a PE array
        cannot work on part of a channel: MNIST's one input channel over 16); the traffic
        keeps the exact fraction."""
        split = LayerSplit(layer, float(batch))
        for kind in column:
            split = split.split(_PAPER_KINDS[kind])
        channels = max(1, math.ceil(layer.input.channels * split.in_fraction))
        share = Share(layer, int(split.batch), (0, channels), (0, layer.output.channels),
                      (0, layer.output.height), (0, layer.output.width))
        return [share] * hierarchy.members

    def own_costs(self, layer: Layer, batch: int, columns: Sequence[Column],
                  hierarchy: Hierarchy, word_bytes: int, last: bool) -> np.ndarray:
        """Bytes of each column's own steps, every level's pairs."""
        groups = hierarchy.subarray_counts
        costs = []
        for column in columns:
            cost = 0.0
            for level in range(len(column)):
                own, _ = _paper_pair_costs(layer, batch, column[:level], word_bytes,
                                           self.forward_only)
                cost += groups[level] * own[column[level]]
            costs.append(cost)
        return np.array(costs)

    def boundary_costs(self, producer: Layer, consumer: Layer, batch: int,
                       producer_columns: Sequence[Column], columns: Sequence[Column],
                       hierarchy: Hierarchy, word_bytes: int) -> np.ndarray:
        """Bytes across the boundary for every pair of columns, every level's pairs."""
        groups = hierarchy.subarray_counts
        costs = np.zeros((len(producer_columns), len(columns)))
        for j, column in enumerate(columns):
            for level in range(len(column)):
                if column[level] != IN:
                    continue  # only a batch -> in boundary moves bytes (Table 2)
                inter = groups[level] * _paper_pair_costs(consumer, batch, column[:level],
                                                          word_bytes, self.forward_only)[1]
                for i, previous in enumerate(producer_columns):
                    if previous[level] == BATCH:
                        costs[i, j] += inter
        return costs

    def steps(self, layers: Sequence[Layer], batch: int, columns: Sequence[Column],
              hierarchy: Hierarchy, word_bytes: int) -> dict[StepKey, StepMessages]:
        """Each member of a half sends its part of what its half sends the other half,
        to its counterpart; levels in order (as HyPar's pairs)."""
        members = np.arange(hierarchy.members)
        parts: dict[StepKey, list[tuple[np.ndarray, ...]]] = {}
        for level in range(hierarchy.levels):
            half = hierarchy.strides[level]
            previous = None
            for index, (layer, column) in enumerate(zip(layers, columns, strict=True)):
                split = _paper_share(layer, batch, column[:level], word_bytes)
                choice = _PAPER_KINDS[column[level]]
                for transfer in layer_transfers(split, previous, choice):
                    if not self._keep(transfer.kind):
                        continue
                    part = transfer.bytes_per_direction / half
                    parts.setdefault((index, transfer.kind), []).append(
                        (members, members ^ half, np.full(len(members), part),
                         np.full(len(members), level)))
                previous = choice
        return {key: StepMessages(*key, *(np.concatenate([p[i] for p in pieces])
                                         for i in range(4)),
                                  np.zeros(len(pieces) * len(members), dtype=np.int64))
                for key, pieces in parts.items()}


    # -- a plan of a chain graph (`planner.plan`) ----------------------------------

    def node_layout(self, site: Site, batch: int, column: Column,
                    hierarchy: Hierarchy) -> node_layout.NodeLayout:
        """Every member the same box of a chain layer's node: its `member_shares` samples and
        input channels, every other loop whole (what the schedule computes and the cube
        keeps under HyPar's equal shares)."""
        share = self.member_shares(layer_of(site.node), batch, column, hierarchy)[0]
        extents = {**node_layout.loops(site, batch), Dim.N: share.batch,
                   site.desc.reduction: share.channels}
        return node_layout.NodeLayout(site, {dim: np.tile([0, extent], (hierarchy.members, 1))
                                             for dim, extent in extents.items()})

    def plan_costs(self, graph: Graph, batch: int, word_bytes: int) -> layout_costs.Costs:
        """The planner's tables of a chain graph: this model's own and boundary bytes."""
        from hypar_sim.planner.chain_costs import ChainCosts

        return ChainCosts(graph, self, self, batch, word_bytes)

    def plan_matrices(self, graph: Graph, layouts: Sequence[node_layout.NodeLayout],
                      batch: int, word_bytes: int) -> dict[StepKey, Moved]:
        """None: HyPar's pairs are messages already (`graph_steps`)."""
        return {}

    def graph_steps(self, graph: Graph, columns: Sequence[Column],
                    matrices: dict[StepKey, Moved], batch: int, hierarchy: Hierarchy,
                    word_bytes: int, buckets: Sequence[Sequence[int]] = ()
                    ) -> dict[StepKey, StepMessages]:
        """The chain's `steps`, keyed by node; no buckets (HyPar exchanges a layer's gradient
        as it is computed)."""
        layers = [layer_of(node) for node in graph.nodes]
        return self.steps(layers, batch, columns, hierarchy, word_bytes)

class LayoutTraffic(_Phased):
    """The redistribution rule on the members' real layouts (`partition.node_layout`)."""

    name = "layout"
    summary = "needs minus holds on the members' real layouts (any kind, any level size)"

    @property
    def kinds(self) -> tuple[str, ...]:
        """Every registered kind (`replicate` included: a node's members may compute it
        whole)."""
        return tuple(KINDS)

    def check(self, hierarchy: Hierarchy, kinds: Sequence[str], batch: int,
              searches: bool) -> None:
        """Any kind, any level size, any batch (what a node cannot take it is not offered)."""

    def check_plan(self, layers: Sequence[Layer], batch: int, columns: Sequence[Column],
                   hierarchy: Hierarchy) -> None:
        """Uneven shares are fine; what a layer cannot take is refused by `offered`."""

    def offered(self, layer: Layer, batch: int, column: Column, hierarchy: Hierarchy) -> bool:
        return shares.offered(layer, batch, column, hierarchy)

    def member_shares(self, layer: Layer, batch: int, column: Column,
                      hierarchy: Hierarchy) -> list[Share]:
        """Every member's integer box (uneven where a dimension does not divide)."""
        return shares.column_shares(layer, batch, column, hierarchy)

    #: How a step's bytes become messages (`partition.collectives`).
    collective = "ring"

    def own_costs(self, layer: Layer, batch: int, columns: Sequence[Column],
                  hierarchy: Hierarchy, word_bytes: int, last: bool) -> np.ndarray:
        """Closed forms of the rule's totals (`partition.totals`; tests check them against
        the cell-by-cell transfers)."""
        return totals.own_costs(layer, batch, columns, hierarchy, word_bytes, last,
                                self.forward_only)

    def boundary_costs(self, producer: Layer, consumer: Layer, batch: int,
                       producer_columns: Sequence[Column], columns: Sequence[Column],
                       hierarchy: Hierarchy, word_bytes: int) -> np.ndarray:
        return totals.cached_boundary_costs(producer, consumer, batch, tuple(producer_columns),
                                            tuple(columns), hierarchy, word_bytes,
                                            self.forward_only)

    def steps(self, layers: Sequence[Layer], batch: int, columns: Sequence[Column],
              hierarchy: Hierarchy, word_bytes: int) -> dict[StepKey, StepMessages]:
        """Every step's messages (the same object for the same plan: the planner's traffic
        and the schedule read one; do not change it)."""
        steps = _layout_steps(self.collective, tuple(layers), batch,
                              tuple(map(tuple, columns)), hierarchy, word_bytes)
        if not self.forward_only:
            return steps
        return {key: messages for key, messages in steps.items() if self._keep(key[1])}

    # -- a plan of a graph (`planner.plan`) ----------------------------------------

    def node_layout(self, site: Site, batch: int, column: Column,
                    hierarchy: Hierarchy) -> node_layout.NodeLayout:
        """Every member's box of the node under its column (`node_layout.layout`)."""
        return node_layout.layout(site, batch, column, hierarchy)

    def plan_costs(self, graph: Graph, batch: int, word_bytes: int) -> layout_costs.Costs:
        """The planner's tables: bytes of the rule on the nodes' layouts (`node_layout`)."""
        return layout_costs.Costs(batch, word_bytes, self.forward_only)

    def plan_matrices(self, graph: Graph, layouts: Sequence[node_layout.NodeLayout],
                      batch: int, word_bytes: int) -> dict[StepKey, Moved]:
        """Bytes [src, dst] of every step (`plan_messages.graph_matrices`)."""
        from hypar_sim.planner.plan_messages import graph_matrices

        return graph_matrices(graph, layouts, batch, word_bytes, self.forward_only)

    def graph_steps(self, graph: Graph, columns: Sequence[Column],
                    matrices: dict[StepKey, Moved], batch: int, hierarchy: Hierarchy,
                    word_bytes: int, buckets: Sequence[Sequence[int]] = ()
                    ) -> dict[StepKey, StepMessages]:
        """The steps' `matrices` sent by the model's collective, gradients fused in
        `buckets` (`plan_messages.graph_steps`)."""
        from hypar_sim.planner.plan_messages import graph_steps

        return graph_steps(matrices, hierarchy, buckets, self.collective)

@lru_cache(maxsize=64)
def _layout_steps(collective: str, layers: tuple[Layer, ...], batch: int,
                  columns: tuple[Column, ...], hierarchy: Hierarchy,
                  word_bytes: int) -> dict[StepKey, StepMessages]:
    """The steps of a chain of `layers` read as a graph (`network.as_graph`): its nodes'
    layouts, their matrices, sent by `collective`."""
    from hypar_sim.planner.plan_messages import graph_layouts, graph_matrices, graph_steps

    graph = as_graph(Network("chain", layers[0].input, layers))
    layouts = graph_layouts(graph, batch, hierarchy, columns)
    return graph_steps(graph_matrices(graph, layouts, batch, word_bytes), hierarchy, (),
                       collective)


class LevelsLayoutTraffic(LayoutTraffic):
    """The layout rule's bytes, its collectives sent level by level (`partition.collectives`
    `levels`): the same bytes and plans, in sum(level sizes - 1) rounds per collective
    instead of a ring's k - 1 (the choice for arrays of hundreds of accelerators and more)."""

    name = "layout_levels"
    summary = ("the same bytes, reduce-scatters and all-gathers sent one level at a time (a "
               "round per level, not a ring's k - 1: for hundreds of accelerators and more)")
    collective = "levels"


TrafficModel = PaperTraffic | LayoutTraffic


TRAFFIC_MODELS: dict[str, TrafficModel] = {
    m.name: m for m in (LayoutTraffic(), LevelsLayoutTraffic(), PaperTraffic())}
DEFAULT_TRAFFIC_MODEL = "layout"


def traffic_model(name: str, phases: str = "training") -> TrafficModel:
    """The model called `name`, counting the transfers of `phases` (`PHASES`)."""
    if name not in TRAFFIC_MODELS:
        raise InputError(f"--traffic-model: unknown '{name}'{closest(name, TRAFFIC_MODELS)}; "
                         f"allowed: {', '.join(TRAFFIC_MODELS)}")
    return TRAFFIC_MODELS[name].for_phases(phases)
